"""Tiny GGUF files written with ``gguf``: a vocabulary and one tensor, for metadata and compatibility tests."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

BASE = [f"tok{i}" for i in range(300)]


def write_tiny(path: Path, tokens=BASE, model="gpt2", pre="default", bos=1, eos=2, add_bos=None) -> Path:
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_tokenizer_model(model)
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(list(tokens))
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    return finish(w, path, len(tokens))


def finish(w: gguf.GGUFWriter, path: Path, n_tokens: int) -> Path:
    """The one tensor (a zero embedding of ``n_tokens`` rows of 8) and the file written."""
    w.add_tensor("token_embd.weight", np.zeros((n_tokens, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
