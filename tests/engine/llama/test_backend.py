"""The backend (llama/backend.py) on the real demo target: the cache follows the history (``sync`` keeps the
common prefix and reads only what is missing), ``decode`` returns the rows asked for, a batched pass's rows match
one-token steps up to the kernels' rounding, a rollback drops exactly the rejected tail, and a batch past the
context is refused with the error the loop reports."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.llama.backend import ContextFullError, common_prefix

from support.greedy import NEAR_TIE


@pytest.mark.parametrize("a, b, n", [([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2),
                                     ([1, 2, 3, 4], [1, 2, 9, 4], 2), ([5], [6], 0)])
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n == common_prefix(b, a)


def test_sync_keeps_the_common_prefix_and_rollback_drops_the_tail(smol_pair):
    smol_pair.reset()
    model = smol_pair.target
    prompt = smol_pair.target.tokenize("The quick brown fox jumps over the lazy dog")
    model.sync(prompt)
    assert model.n_past == len(prompt) and model.missing(prompt + [42, 43]) == 2
    rows = model.decode([42, 43], range(2))
    assert rows.shape == (2, model.n_vocab) and model.n_past == len(prompt) + 2
    model.rollback(len(prompt))
    assert model.n_past == len(prompt) and model.missing(prompt[:-1] + [7]) == 1


def test_a_batched_pass_gives_the_rows_of_one_token_steps(smol_pair):
    smol_pair.reset()
    model = smol_pair.target
    prompt = smol_pair.target.tokenize("Once upon a time")
    model.sync(prompt[:-1], need_logits=False)
    batch = [prompt[-1], 11, 12]
    rows = model.decode(batch, range(3)).copy()
    model.rollback(len(prompt) - 1)
    steps = [model.decode([t])[0].copy() for t in batch]  # (a row is a view of llama.cpp's buffer until the next pass)
    # The same positions computed by different kernels agree only up to their rounding: up to 0.027 logits apart
    # on an AMD EPYC, so a top-two gap under twice that may break either way (tests/support/greedy.py).
    assert np.max(np.abs(rows - np.stack(steps))) < NEAR_TIE / 2
    assert [int(np.argmax(r)) for r in rows] == [int(np.argmax(s)) for s in steps]  # no near-tie in this text


def test_a_batch_past_the_context_is_refused(smol_pair):
    smol_pair.reset()
    model = smol_pair.target
    with pytest.raises(ContextFullError):
        model.sync([1] * (model.n_ctx + 1), need_logits=False)
    model.sync([1, 2])
    assert model.n_past == 2  # still usable
