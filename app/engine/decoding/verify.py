"""Verification rules for speculative decoding, as pure functions on numpy arrays.

Notation follows Leviathan et al. (target M_p, draft M_q): ``p`` is the target's distribution and ``q`` the
draft's, both *after* the same sampler transforms (penalties, top-k, top-p, min-p, temperature), ``gamma`` is
the number of drafted tokens and ``x`` a drafted token.

Rules:
- ``greedy_accept``: temperature 0. The longest prefix of the draft that equals the target's argmax.
- ``rejection_sample``: exact speculative sampling. Accept ``x ~ q`` with probability ``min(1, p(x)/q(x))``;
  on rejection sample from ``norm(max(0, p - q))``; when all ``gamma`` drafts are accepted, sample a bonus
  token from ``p`` at position ``gamma + 1``. The emitted tokens are distributed exactly as ``p``.
  A deterministic proposer (prompt lookup, a greedy draft) is the case ``q = onehot(x)``.
- ``sample_and_match``: llama.cpp's rule. Sample from ``p`` at every position and keep the draft while it
  matches. Also exact, with lower acceptance at temperature > 0.

References:
- Y. Leviathan, M. Kalman, Y. Matias. Fast Inference from Transformers via Speculative Decoding.
  ICML 2023, arXiv:2211.17192 (Algorithm 1, Theorem 3.8).
- C. Chen, S. Borgeaud, G. Irving, J.-B. Lespiau, L. Sifre, J. Jumper. Accelerating Large Language Model
  Decoding with Speculative Sampling. arXiv:2302.01318 (Algorithm 2).
- llama.cpp ``common_sampler_sample_and_accept_n`` (common/sampling.cpp) for sample-and-match.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

Rows = Union[np.ndarray, Sequence[np.ndarray]]  # distributions by position


def sample_from(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from an (unnormalised, non-negative) probability vector."""
    cdf = np.cumsum(probs, dtype=np.float64)
    total = cdf[-1]
    if not total > 0.0:
        raise ValueError("cannot sample from an all-zero distribution")
    idx = int(np.searchsorted(cdf, rng.random() * total, side="right"))
    return min(idx, probs.shape[0] - 1)


def greedy_accept(draft: Sequence[int], target_argmax: Sequence[int]) -> int:
    """Number of leading draft tokens equal to the target's argmax at the same position."""
    n = 0
    for x, t in zip(draft, target_argmax):
        if x != t:
            break
        n += 1
    return n


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``norm(max(0, p - q))``; falls back to ``p`` when ``p <= q`` everywhere (then p == q up to rounding)."""
    r = np.maximum(p - q, 0.0)
    s = r.sum()
    return r / s if s > 0.0 else p


def rejection_sample(
    p: Rows,
    q: Optional[Rows],
    draft: Sequence[int],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Exact speculative sampling over one verification step.

    Args:
        p: target distributions, ``gamma + 1`` rows of length V (an array or a lazily computed sequence);
           row ``i`` is conditioned on ``draft[:i]``.
        q: draft distributions, shape ``(gamma, V)``, each row the one ``draft[i]`` was sampled from;
           ``None`` for a deterministic proposer (``q = onehot(draft[i])``).
        draft: the ``gamma`` drafted token ids.
        rng: the generation's random source.

    Returns:
        ``(n, token)``: the number of accepted draft tokens and the token that follows them
        (a correction from the residual if ``n < gamma``, else the bonus token sampled from ``p[gamma]``).
    """
    gamma = len(draft)
    for i, x in enumerate(draft):
        p_i = p[i]
        q_i = _proposal_row(q, i, x, len(p_i))
        if rng.random() < min(1.0, float(p_i[x]) / float(q_i[x])):
            continue
        return i, sample_from(residual(p_i, q_i), rng)
    return gamma, sample_from(p[gamma], rng)


def _proposal_row(q: Optional[Rows], i: int, x: int, vocab: int) -> np.ndarray:
    """Row ``i`` of q, or ``onehot(x)`` for a deterministic proposer (also when q(x) = 0, which a token
    actually drawn from q cannot have)."""
    if q is not None and q[i] is not None and q[i][x] > 0.0:  # (a None row: that token was deterministic)
        return q[i]
    onehot = np.zeros(vocab, dtype=np.float64)
    onehot[x] = 1.0
    return onehot


def sample_and_match(p: Rows, draft: Sequence[int], rng: np.random.Generator) -> tuple[int, int]:
    """llama.cpp's rule: sample ``y_i ~ p_i`` and accept while ``y_i == draft[i]``.

    Returns ``(n, token)`` as :func:`rejection_sample`.
    """
    for i, x in enumerate(draft):
        y = sample_from(p[i], rng)
        if y != x:
            return i, y
    return len(draft), sample_from(p[len(draft)], rng)
