"""Seeds that hold with speculation: sampling by the Gumbel-max trick with noise fixed by (seed, position).

At every absolute position ``t`` of the sequence the noise ``g_t ~ Gumbel(0, 1)^V`` is a pure function of
``(seed, t)`` (numpy's Philox counter-based generator keyed by the pair, no global state, the same in every
process). The target's token at ``t`` is ``y_t = argmax_x(log p_t(x) + g_t(x))``, which is distributed exactly
as ``p_t`` (the Gumbel-max trick). The draft proposes with the *same* noise, ``x_t = argmax_x(log q_t(x) +
g_t(x))`` (or any deterministic proposal, ``q = onehot``), and a draft token is accepted iff ``x_t == y_t``.

So the target's sample at ``t`` is fixed before the draft is judged: whatever the proposer, K or speculation
on/off, the emitted text is the sequence of ``y_t``, the same text plain decoding with this seed produces.
Exactness needs nothing of the draft: every emitted token is a Gumbel-max sample of the target's ``p_t`` with
noise independent of everything before ``t``. Acceptance is that of a coupling of ``p`` and ``q`` built
without communication, ``P(x = y) >= (1 - D_TV(p, q)) / (1 + D_TV(p, q))`` (Daliri et al.), at most the
``1 - D_TV`` of rejection sampling (Leviathan et al.), which stays available as the ``rejection`` rule.

References:
- E. J. Gumbel. Statistical Theory of Extreme Values and Some Practical Applications. 1954 (the Gumbel-max trick).
- C. J. Maddison, D. Tarlow, T. Minka. A* Sampling. NeurIPS 2014 (Gumbel-max as sampling by perturbation).
- M. Daliri, C. Musco, A. T. Suresh. Coupling without Communication and Drafter-Invariant Speculative
  Decoding. arXiv:2408.07978 (Gumbel-max coupling of draft and target, the acceptance bound above).
- Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu. SpecTr: Fast Speculative Decoding via Optimal
  Transport. NeurIPS 2023, arXiv:2310.15141 (speculative decoding as a coupling of p and q).
- Y. Leviathan, M. Kalman, Y. Matias. Fast Inference from Transformers via Speculative Decoding.
  ICML 2023, arXiv:2211.17192 (rejection sampling, acceptance 1 - D_TV).
- J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw. Parallel Random Numbers: As Easy as 1, 2, 3. SC 2011
  (Philox, the counter-based generator keyed by (seed, position)).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Protocol, Sequence

import numpy as np

_MASK64 = (1 << 64) - 1


class Rows(Protocol):
    """Rows by position (an array, or rows computed on first use)."""

    def __getitem__(self, i: int) -> np.ndarray: ...


def gumbel_noise(seed: int, position: int, vocab: int) -> np.ndarray:
    """``g ~ Gumbel(0, 1)^vocab`` as a pure function of ``(seed, position)``: Philox keyed by the pair.

    The same in every process and on every platform numpy supports (Philox is counter-based; its output
    for a key does not depend on anything drawn before)."""
    bits = np.random.Philox(key=np.array([seed & _MASK64, position & _MASK64], dtype=np.uint64))
    u = np.random.Generator(bits).random(vocab) + 2.0 ** -54  # strictly inside (0, 1): no log(0)
    return -np.log(-np.log(u))


class GumbelNoise:
    """The noise of one seeded generation, by absolute position; the draft and the target read the same rows,
    so the last few are kept (a drafted position is read by the draft, then by the verify pass). A row is as
    long as the longest vocabulary asked for (a draft's may be a little larger than the target's): a longer
    row extends a shorter one, since Philox draws the same prefix whatever the length."""

    def __init__(self, seed: int, keep: int = 64):
        self.seed, self.keep = int(seed), keep
        self._rows: OrderedDict[int, np.ndarray] = OrderedDict()

    def at(self, position: int, size: int) -> np.ndarray:
        row = self._rows.get(position)
        if row is None or row.shape[0] < size:
            row = gumbel_noise(self.seed, position, size)
            self._rows[position] = row
            if len(self._rows) > self.keep:
                self._rows.popitem(last=False)
        return row


class NoiseRows:
    """The noise rows of one verify pass: row ``i`` is the noise at absolute position ``base + i``."""

    def __init__(self, noise: GumbelNoise, base: int, size: int):
        self.noise, self.base, self.size = noise, base, size

    def __getitem__(self, i: int) -> np.ndarray:
        return self.noise.at(self.base + i, self.size)


def gumbel_max(p: np.ndarray, g: np.ndarray) -> int:
    """``argmax_x(log p(x) + g(x))`` over the support of ``p``: a sample of ``p`` when ``g`` is Gumbel noise.

    ``p`` may be unnormalised; tokens with ``p(x) = 0`` are never chosen."""
    if p.shape[0] > g.shape[0]:
        raise ValueError(f"noise for {g.shape[0]} tokens cannot sample a distribution over {p.shape[0]}")
    support = np.flatnonzero(p > 0.0)
    if support.size == 0:
        raise ValueError("cannot sample from an all-zero distribution")
    scores = np.log(p[support]) + g[support]
    return int(support[int(np.argmax(scores))])


def coupled_accept(p: Rows, draft: Sequence[int], noise: Rows) -> tuple[int, int]:
    """Verification by Gumbel-max coupling over one step.

    Args:
        p: target distributions, ``gamma + 1`` rows (row ``i`` conditioned on ``draft[:i]``; may be lazy).
        draft: the ``gamma`` drafted tokens (drawn with the same noise, or deterministic).
        noise: ``gamma + 1`` Gumbel rows, ``noise[i]`` the one fixed for row ``i``'s absolute position.

    Returns:
        ``(n, token)``: accepted draft tokens (the longest prefix equal to the target's Gumbel-max samples)
        and the target's sample at the first position that differs (or the bonus position).
    """
    return coupled_accept_by(lambda i: gumbel_max(p[i], noise[i]), draft)


def coupled_accept_by(draw: Callable[[int], int], draft: Sequence[int]) -> tuple[int, int]:
    """:func:`coupled_accept` with the target's sample at row ``i`` given as ``draw(i)`` (e.g. a grammar's
    constrained Gumbel-max, which need not compute the whole distribution)."""
    for i, x in enumerate(draft):
        y = draw(i)
        if y != x:
            return i, y
    return len(draft), draw(len(draft))
