"""Reference decoders the benchmark compares Tandem against, on the same prompts and the same machine.

- ``bare_greedy``: the least Python a greedy loop can have: ``llama_batch_get_one`` + ``llama_decode`` +
  argmax of the last row. Tandem's plain decoding should stay within a few percent of it.
- ``llama_cpp_lookup``: llama-cpp-python's own ``Llama.generate`` with ``LlamaPromptLookupDecoding`` (its
  only speculative path), greedy, ``logits_all=True`` as that path requires.

Both return generated tokens per second over decode time (prompt processing excluded), like Tandem's runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import llama_cpp as L
import numpy as np

from app.engine.backend import default_threads, quiet_logs


def bare_greedy(model_path: Path | str, prompt: Sequence[int], n_tokens: int, n_ctx: int = 4096,
                n_threads: int = 0) -> tuple[float, list[int]]:
    """(tokens/s, tokens) of a minimal greedy loop on the low-level API."""
    quiet_logs()
    model = L.llama_model_load_from_file(str(model_path).encode(), L.llama_model_default_params())
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = cparams.n_ubatch = 512
    cparams.n_threads = cparams.n_threads_batch = n_threads or default_threads()
    cparams.no_perf = True
    ctx = L.llama_init_from_model(model, cparams)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    try:
        arr = (L.llama_token * len(prompt))(*prompt)
        for start in range(0, len(prompt), 512):
            chunk = (L.llama_token * min(512, len(prompt) - start)).from_buffer(arr, start * 4)
            if L.llama_decode(ctx, L.llama_batch_get_one(chunk, len(chunk))) != 0:
                raise RuntimeError("llama_decode failed")
        out: list[int] = []
        tok = (L.llama_token * 1)()
        t0 = time.perf_counter()
        for _ in range(n_tokens):
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            nxt = int(np.argmax(logits))
            if L.llama_vocab_is_eog(vocab, nxt):
                break
            out.append(nxt)
            tok[0] = nxt
            if L.llama_decode(ctx, L.llama_batch_get_one(tok, 1)) != 0:
                raise RuntimeError("llama_decode failed")
        elapsed = time.perf_counter() - t0
    finally:
        L.llama_free(ctx)
        L.llama_model_free(model)
    return (len(out) / elapsed if elapsed > 0 else 0.0), out


def llama_cpp_lookup(model_path: Path | str, prompt: Sequence[int], n_tokens: int, num_pred_tokens: int = 10,
                     n_ctx: int = 4096, n_threads: int = 0) -> tuple[float, list[int]]:
    """(tokens/s, tokens) of llama-cpp-python's prompt-lookup decoding, greedy (time after the first token)."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    quiet_logs()
    llm = Llama(str(model_path), n_ctx=n_ctx, n_threads=n_threads or default_threads(), logits_all=True,
                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens), verbose=False)
    try:
        out: list[int] = []
        t_first = None
        for tok in llm.generate(list(prompt), top_k=1, temp=0.0, repeat_penalty=1.0):
            if llm._token_eos == tok or L.llama_vocab_is_eog(llm._model.vocab, tok):
                break
            out.append(int(tok))
            if t_first is None:
                t_first = time.perf_counter()
            if len(out) >= n_tokens:
                break
        elapsed = time.perf_counter() - t_first if t_first else 0.0
    finally:
        llm.close()
    return ((len(out) - 1) / elapsed if elapsed > 0 else 0.0), out
