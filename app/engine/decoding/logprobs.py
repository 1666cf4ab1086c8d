"""Log-probabilities of emitted tokens, from the target's logits of the pass that emitted them.

Every emitted token, drafted or not, was judged on a row of the target's verify pass: its log-probability is
the log-softmax of that row (the model's own distribution, before the sampler's transforms and any grammar,
as llama.cpp's server reports ``n_probs`` by default and OpenAI's ``logprobs`` do), with the ``top`` most
likely alternatives. ``log_softmax(z)_x = z_x - logsumexp(z)``, computed in float64 with the max subtracted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOP = 20  # OpenAI's limit for top_logprobs


@dataclass(frozen=True)
class TopLogprob:
    token: int
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float  # the target's log-softmax of ``token``
    top: tuple[TopLogprob, ...] = ()  # the most likely tokens at that position, most likely first


def log_softmax(z: np.ndarray) -> np.ndarray:
    """``z - logsumexp(z)`` in float64 (``-inf`` entries stay ``-inf``)."""
    z = np.asarray(z, dtype=np.float64)
    m = float(np.max(z))
    return z - (m + float(np.log(np.sum(np.exp(z - m)))))


def token_logprob(logits: np.ndarray, token: int, top: int = 0) -> TokenLogprob:
    """The log-probability of ``token`` under ``softmax(logits)`` and the ``top`` (<= 20) likeliest tokens."""
    if not 0 <= top <= MAX_TOP:
        raise ValueError(f"top_logprobs must be between 0 and {MAX_TOP}, not {top}")
    lp = log_softmax(logits)
    best: tuple[TopLogprob, ...] = ()
    if top:
        idx = np.argpartition(-lp, top - 1)[:top]
        idx = idx[np.argsort(-lp[idx], kind="stable")]
        best = tuple(TopLogprob(int(i), float(lp[i])) for i in idx)
    return TokenLogprob(int(token), float(lp[token]), best)
