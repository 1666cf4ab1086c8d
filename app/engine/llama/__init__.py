"""llama.cpp through llama-cpp-python's low-level API: one model and context (``backend``), the vocabulary
rule, recurrent/hybrid memory rollback, NextN rows, where layers went, the log, devices and linear-time
tokenisation. Never imports the drafters, control or the loop."""
