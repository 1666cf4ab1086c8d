"""The speculative decoding engine on llama-cpp-python's low-level API. No UI code lives here."""
