"""Random tensors shared by the made-up MTP models (``tinymtp.py``, ``tinyglm4mtp.py``): noise scaled by the fan-in,
the embeddings every test model shares (drawn from one fixed stream, so the trunk's seed alone changes the model),
and the NextN head's ``eh_proj`` that passes the token's normed embedding through and mixes in the hidden row."""

from __future__ import annotations

import gguf
import numpy as np


class Parts:
    """Tensors written to ``w``, drawn from ``rng`` in the order they are asked for."""

    def __init__(self, w: gguf.GGUFWriter, rng: np.random.Generator):
        self.w, self.rng = w, rng

    def noise(self, name: str, *shape: int, s: float) -> None:
        """Shape in numpy order (rows, cols): N(0, 1) scaled by ``s`` / sqrt(fan-in)."""
        self.w.add_tensor(name, (self.rng.standard_normal(shape) * s / np.sqrt(shape[-1])).astype(np.float32))

    def ones(self, name: str, n: int) -> None:
        self.w.add_tensor(name, np.ones(n, dtype=np.float32))

    def embeddings(self, n_vocab: int, n_embd: int) -> None:
        """Input and output embeddings from the fixed stream (every seed shares them) and the output norm."""
        shared = np.random.default_rng(12345)
        self.w.add_tensor("token_embd.weight", shared.standard_normal((n_vocab, n_embd)).astype(np.float16))
        self.w.add_tensor("output.weight", shared.standard_normal((n_vocab, n_embd)).astype(np.float16))
        self.ones("output_norm.weight", n_embd)

    def nextn(self, p: str, n_embd: int, mix: float) -> None:
        """The NextN norms and ``eh_proj`` = [I | mix·noise]: out = [e_norm | h_norm] @ eh.T."""
        self.ones(p + "nextn.enorm.weight", n_embd)
        self.ones(p + "nextn.hnorm.weight", n_embd)
        eh = np.zeros((n_embd, 2 * n_embd), dtype=np.float32)
        eh[:, :n_embd] = np.eye(n_embd)
        eh[:, n_embd:] = self.rng.standard_normal((n_embd, n_embd)) * mix / np.sqrt(n_embd)
        self.w.add_tensor(p + "nextn.eh_proj.weight", eh)
