"""The speculative decoding core on llama-cpp-python's low-level API: backend (Model), vocab (GGUF vocabulary
rule), sampling, verify, proposers, draftlen, loop (with its Target protocol), events, stats, text, pair,
limits and placement. It imports nothing from app.models, app.lab or app.ui; the Pair lab lives in app/lab."""
