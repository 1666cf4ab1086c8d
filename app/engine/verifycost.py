"""What a target pass over ``n`` tokens costs, ``t_v(n)``, as the choices weigh it: the line ``a + b n`` that
auto K fits over recent passes (``draftlen.py``), with the shape measured for passes of each size.

A line misprices sizes wherever the kernels change with the batch: on this project's CPU a plain step (a
matrix-vector product) sits about 2 ms below the line through the multi-token passes (19.9 ms against 2 tokens'
23.9 and 17 tokens' 55.9 on the demo pair, ``scripts/verify_cost.py``); on an H100 the demo pair's passes cost
1.78 ms for 1 token, 2.89 for 2, 3.3–3.4 for 4–8 and 7.4–10.1 for 10–17, which the line over auto's own passes
priced at 1.22 plain steps for 2 tokens (measured 1.62) and 2.76 for 9 (measured 2.23).

For each size ``n`` > 1 the shape ``s_n``, a pass's seconds over those of a plain pass at most a few passes
before it, is kept (the last ``SIZE_WINDOW``). A shape, not seconds: a slow spell of the machine (another
program on the cores) slows both passes of a pair, so it cancels out, and a size seen rarely follows the line's
level as the machine's speed drifts. Once ``SIZE_MIN`` were seen, its median (one hiccup cannot move it)
replaces the line. The level comes from the line, fitted over the recent passes: the shapes are scaled so that
over those passes (``w_n`` of each size, with the line's forgetting) they cost what the line says they do:

    t_v(n) = lambda s_n                              where n was measured (s_1 = 1),
    lambda = sum_n w_n (a + b n) / sum_n w_n s_n     over the measured sizes,
    t_v(n) = clamp(a + b n, t_v(below), t_v(above))  elsewhere (between the nearest measured sizes),

made non-decreasing in ``n`` (a longer pass never costs less than a shorter one; the running maximum from
``n`` = 1). Sizes never measured stay priced by the line, so what the controller has not tried it judges as
before.

References: Leviathan, Kalman, Matias, ICML 2023 (arXiv:2211.17192), the cost coefficient ``c`` generalised
to a measured ``t_v(n)``; Barlow et al., Statistical Inference under Order Restrictions (1972): monotone
regression (here its simplest form, the running maximum); the median as a robust location estimate (Huber &
Ronchetti, Robust Statistics, 2nd ed., 2009, ch. 3).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Optional

SIZE_WINDOW = 5  # recent passes of one size whose shapes (seconds over a plain pass's) are kept
SIZE_MIN = 3  # passes of a size seen before its median ratio replaces the line (one hiccup cannot move it)


@dataclass(frozen=True)
class VerifyCost:
    """``t_v(n)`` in seconds: call it with ``n``. ``a``, ``b``: the line; ``table``: ``t_v(1) ..
    t_v(len(table))`` with the measured shapes applied (empty: the line alone; beyond it: the line, at least
    the table's last)."""

    a: float
    b: float
    table: tuple = ()

    def __call__(self, n: int) -> float:
        if 0 < n <= len(self.table):
            return self.table[n - 1]
        line = self.a + self.b * n
        return max(line, self.table[-1]) if self.table else line

    @classmethod
    def of(cls, a: float, b: float, shapes: "list[Optional[float]]",
           weights: "Optional[list[float]]" = None) -> "VerifyCost":
        """The line with ``shapes`` (index ``n`` - 1: the median shape of passes of ``n`` tokens, None where
        too few were seen; the first, a plain pass's, is 1 by definition) at the level the line gives passes
        weighted ``weights`` (None: the line's plain step), as the module docstring says."""
        if not any(s is not None for s in shapes[1:]):
            return cls(a, b)
        shapes = [1.0] + list(shapes[1:])
        level = a + b
        if weights is not None:
            seen = [(w, i + 1, s) for i, (w, s) in enumerate(zip(weights, shapes)) if s is not None and w > 0]
            if seen:
                level = sum(w * (a + b * n) for w, n, _ in seen) / sum(w * s for w, _, s in seen)
        table, above = [0.0] * len(shapes), math.inf  # from the top: the nearest measured size above caps the line
        for i in range(len(shapes) - 1, -1, -1):
            s = shapes[i]
            table[i] = above = level * s if s is not None else min(a + b * (i + 1), above)
        floor = 0.0
        for i, t in enumerate(table):  # from the bottom: never below a shorter pass
            table[i] = floor = max(floor, t)
        return cls(a, b, tuple(table))


class SizeShapes:
    """Recent shapes of passes (seconds over a plain pass's near them), by pass size (2 .. ``n_max``)."""

    def __init__(self, n_max: int, forget: float = 1.0):
        self._seen = [deque(maxlen=SIZE_WINDOW) for _ in range(n_max)]
        self._median: list[Optional[float]] = [None] * n_max
        self._weights = [0.0] * n_max
        self._forget = forget

    def count(self, n: int) -> None:
        """A pass of ``n`` tokens ran (every pass: what the level is fitted over, forgotten as the line's)."""
        self._weights = [w * self._forget for w in self._weights]
        if 0 < n <= len(self._weights):
            self._weights[n - 1] += 1.0

    def weights(self) -> list[float]:
        return list(self._weights)

    def add(self, n: int, shape: float) -> None:
        if not 1 < n <= len(self._seen) or shape <= 0:
            return
        seen = self._seen[n - 1]
        seen.append(shape)
        self._median[n - 1] = statistics.median(seen) if len(seen) >= SIZE_MIN else None

    def medians(self) -> list[Optional[float]]:
        return list(self._median)
