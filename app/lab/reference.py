"""Reference decoders the benchmark compares Tandem against, on the same prompts and the same machine.

- ``bare_greedy``: the least Python a greedy loop can have: ``llama_batch_get_one`` + ``llama_decode`` +
  argmax of the last row. Tandem's plain decoding should stay within a few percent of it.
- ``bare_speculative``: the least Python a greedy draft-then-verify loop can have, with a fixed K: the
  target/draft pair's ceiling on this machine, against which Tandem's own speculative loop is measured.
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

from app.engine.llama.backend import default_threads
from app.engine.llama.llamalog import quiet_logs


def _open(model_path: Path | str, n_ctx: int, n_threads: int):
    """(model, context) with the settings Tandem's backend uses."""
    quiet_logs()
    model = L.llama_model_load_from_file(str(model_path).encode(), L.llama_model_default_params())
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = cparams.n_ubatch = 512
    cparams.n_threads = cparams.n_threads_batch = n_threads or default_threads()
    cparams.no_perf = True
    return model, L.llama_init_from_model(model, cparams)


def _close(model, ctx) -> None:
    L.llama_free(ctx)
    L.llama_model_free(model)


def _prefill(ctx, tokens: Sequence[int]) -> None:
    arr = (L.llama_token * len(tokens))(*tokens)
    for start in range(0, len(tokens), 512):
        chunk = (L.llama_token * min(512, len(tokens) - start)).from_buffer(arr, start * 4)
        if L.llama_decode(ctx, L.llama_batch_get_one(chunk, len(chunk))) != 0:
            raise RuntimeError("llama_decode failed")


def bare_greedy(model_path: Path | str, prompt: Sequence[int], n_tokens: int, n_ctx: int = 4096,
                n_threads: int = 0) -> tuple[float, list[int]]:
    """(tokens/s, tokens) of a minimal greedy loop on the low-level API."""
    model, ctx = _open(model_path, n_ctx, n_threads)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    try:
        _prefill(ctx, prompt)
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
        _close(model, ctx)
    return (len(out) / elapsed if elapsed > 0 else 0.0), out


def bare_speculative(target_path: Path | str, draft_path: Path | str, prompt: Sequence[int], n_tokens: int,
                     k: int = 8, n_ctx: int = 4096, n_threads: int = 0) -> tuple[float, list[int]]:
    """(tokens/s, tokens) of a minimal greedy draft-then-verify loop with a fixed ``k``.

    The draft decodes what it has not seen and then ``k - 1`` single tokens (argmax each); the target decodes
    ``[last] + draft`` in one batch with logits on every row; the longest agreeing prefix is kept plus the
    target's own next token; both KV caches drop what was rejected.
    """
    (tm, tctx), (dm, dctx) = _open(target_path, n_ctx, n_threads), _open(draft_path, n_ctx, n_threads)
    vocab = L.llama_model_get_vocab(tm)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    batch = L.llama_batch_init(max(k + 1, 512), 0, 1)

    def decode(ctx, toks: Sequence[int], pos: int, all_rows: bool) -> np.ndarray:
        batch.n_tokens = len(toks)
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = t, pos + i, 1, 0
            batch.logits[i] = all_rows or i == len(toks) - 1
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        rows = len(toks) if all_rows else 1
        return np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(rows, n_vocab))

    try:
        _prefill(tctx, prompt[:-1])
        _prefill(dctx, prompt[:-1])
        tokens, out, n_draft_kv = list(prompt), [], len(prompt) - 1  # type: list[int], list[int], int
        t0 = time.perf_counter()
        while len(out) < n_tokens:
            kk = min(k, n_tokens - len(out) - 1)
            draft: list[int] = []
            if kk > 0:
                x = int(np.argmax(decode(dctx, tokens[n_draft_kv:], n_draft_kv, False)[-1]))
                draft.append(x)
                for _ in range(kk - 1):
                    x = int(np.argmax(decode(dctx, [x], len(tokens) + len(draft) - 1, False)[-1]))
                    draft.append(x)
                n_draft_kv = len(tokens) + len(draft) - 1
            best = np.argmax(decode(tctx, [tokens[-1]] + draft, len(tokens) - 1, True), axis=1).tolist()
            n = 0
            while n < len(draft) and draft[n] == best[n]:
                n += 1
            L.llama_memory_seq_rm(L.llama_get_memory(tctx), 0, len(tokens) + n, -1)
            n_draft_kv = min(n_draft_kv, len(tokens) + n)
            L.llama_memory_seq_rm(L.llama_get_memory(dctx), 0, n_draft_kv, -1)
            new = draft[:n] + [best[n]]
            eog = next((i for i, t in enumerate(new) if L.llama_vocab_is_eog(vocab, t)), None)
            new = new[:eog] if eog is not None else new
            tokens += new
            out += new
            if eog is not None:
                break
        elapsed = time.perf_counter() - t0
    finally:
        L.llama_batch_free(batch)
        _close(dm, dctx)
        _close(tm, tctx)
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
