"""Log-probabilities of emitted tokens (``logprobs.py``) against numpy's own log-softmax, on made-up logits: the
likeliest alternatives in order, masked (``-inf``) entries, large logits, and the OpenAI limit on ``top``. Pure."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.decoding.logprobs import MAX_TOP, log_softmax, token_logprob


def reference(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    return z - np.log(np.sum(np.exp(z)))


def test_token_logprob_is_the_log_softmax_with_the_top_alternatives_in_order():
    z = np.random.default_rng(0).normal(0.0, 3.0, 500).astype(np.float32)
    ref = reference(z)
    out = token_logprob(z, 7, top=5)
    assert out.token == 7 and out.logprob == pytest.approx(ref[7], abs=1e-9)
    assert [t.token for t in out.top] == list(np.argsort(-ref)[:5])
    assert [t.logprob for t in out.top] == pytest.approx(np.sort(ref)[::-1][:5], abs=1e-9)
    assert np.exp(log_softmax(z)).sum() == pytest.approx(1.0, abs=1e-12)
    assert token_logprob(z, 7).top == ()  # top = 0: the token's own only


def test_ties_keep_the_lower_id_first_and_masked_tokens_stay_impossible():
    z = np.array([1.0, 3.0, -np.inf, 3.0, 0.5], dtype=np.float32)
    out = token_logprob(z, 2, top=4)
    assert out.logprob == -np.inf  # a token a grammar masked out
    assert [t.token for t in out.top] == [1, 3, 0, 4]
    assert out.top[0].logprob == out.top[1].logprob == pytest.approx(np.log(np.exp(3) / (2 * np.exp(3) + np.exp(1)
                                                                                          + np.exp(0.5))))


def test_large_logits_do_not_overflow():
    z = np.array([1000.0, 999.0, 0.0], dtype=np.float32)
    lp = log_softmax(z)
    assert np.isfinite(lp).all() and lp[0] == pytest.approx(-np.log1p(np.exp(-1.0)), abs=1e-9)


def test_top_is_limited_as_openai_limits_it():
    z = np.zeros(64, dtype=np.float32)
    assert len(token_logprob(z, 0, top=MAX_TOP).top) == MAX_TOP == 20
    for bad in (-1, MAX_TOP + 1):
        with pytest.raises(ValueError, match="top_logprobs must be between 0 and 20"):
            token_logprob(z, 0, top=bad)
