"""Tandem: local speculative decoding on llama.cpp (engine, model manager, Gradio UI)."""

__version__ = "0.1.0"
