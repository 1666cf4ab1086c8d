"""The target's NextN rows (``nextn.py``): why a model cannot draft for itself, and the rows an MTP head reads, kept
by position, on a made-up Qwen3.5 GGUF whose trunk is off (tests/support/tinymtp.py: its row ``h_p`` is then the
normed embedding of the token at ``p``, so equal tokens give equal rows)."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.llama import nextn
from app.engine.llama.backend import Model
from app.testing import load_options
from support.tinymtp import write_qwen35_mtp


@pytest.fixture(scope="module")
def bigram_mtp(tmp_path_factory, smol_paths):
    return write_qwen35_mtp(tmp_path_factory.mktemp("nextn") / "bigram.gguf", smol_paths[1], seed=1, trunk=0.0,
                            head=0.0, mix=0.0)


def test_why_a_model_cannot_draft_for_itself():
    assert nextn.mtp_unavailable("qwen35", 0) == "the model has no MTP (NextN) layers"
    assert nextn.mtp_unavailable("llama", 1) == "llama.cpp builds no MTP graph for the llama architecture"
    assert nextn.BOUND  # this llama.cpp exports the NextN functions (the MTP tests need them too)
    assert nextn.mtp_unavailable("qwen35", 1) is None


def test_rows_are_kept_by_position_as_the_cache_grows(bigram_mtp):
    with Model(bigram_mtp, load_options(n_ctx=1024)) as m:
        rows = m.hidden
        assert rows is not None and nextn.n_heads(m.model) == 1 and rows.n_embd == 64
        assert not rows.row(-1).any()  # before the first token: zeros, as llama.cpp's driver starts
        m.sync([100, 200, 100, 300])
        first = rows.row(0).copy()
        assert np.allclose(rows.row(2), first, atol=1e-5) and not np.allclose(rows.row(1), first, atol=1e-2)
        history = [100, 200, 100, 300]
        for start in range(0, 400, 100):  # past the first 256 rows: the buffer grows, keeping what it held
            chunk = [100 if i % 7 == 0 else 1000 + i for i in range(start, start + 100)]
            m.decode(chunk)
            history += chunk
        assert len(rows.buf) >= len(history) and np.array_equal(rows.row(0), first)
        assert all(np.allclose(rows.row(p), first, atol=1e-4) for p, tok in enumerate(history) if tok == 100)


def test_no_rows_are_kept_without_an_mtp_head(bigram_mtp, smol_pair):
    with Model(bigram_mtp, load_options(n_ctx=256, load_mtp=False)) as m:
        assert m.hidden is None  # loaded without its MTP layers
    assert smol_pair.target.hidden is None and nextn.n_heads(smol_pair.target.model) == 0  # a llama: none
