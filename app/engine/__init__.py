"""The speculative decoding core on llama-cpp-python's low-level API; it imports nothing else from ``app``.

At the top: ``loop`` (plain and speculative decoding as one generator of events), ``pair`` (a loaded
target/draft pair), ``events`` (what the loop yields), ``stats`` and ``summary``, ``target`` (the protocol the
loop verifies with), ``limits`` (every setting's range, checked once) and ``errors`` (the base of every Tandem
error). Rooms: ``llama/`` (bindings and memory types) <- ``decoding/`` (sampler, verify rules, grammars) <-
``control/`` (how much to draft) <- ``drafters/`` (the proposers) <- the loop and the pair <- ``remote/``
(RPC workers, the split target)."""
