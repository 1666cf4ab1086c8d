"""A target split over machines: llama.cpp's RPC workers and the child process that hosts a split target."""
