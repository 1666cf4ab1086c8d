"""The speculative decoding core on llama-cpp-python's low-level API: backend (Model), vocab (GGUF vocabulary
rule), sampling, verify, proposers (with duo: lookup and the draft model chosen per step, mix: that choice's
arithmetic, suffix: lookup's index), draftlen, loop (with its Target protocol), events (str enums for token kinds
and stop reasons), stats and summary, text, pair, limits, placement, rpc and split, and errors (the base of every
Tandem error). It imports nothing else from app; the Pair lab lives in app/lab."""
