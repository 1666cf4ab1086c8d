"""What a target pass over ``n`` tokens costs, ``t_v(n)``, as the choices weigh it: the line ``a + b n`` that
auto K fits over recent passes (``costs.py``), with the shape measured for passes of each size.

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
from typing import Mapping, Optional

SIZE_WINDOW = 5  # recent passes of one size whose shapes (seconds over a plain pass's) are kept
SIZE_MIN = 3  # passes of a size seen before its median ratio replaces the line (one hiccup cannot move it)


@dataclass(frozen=True)
class VerifyCost:
    """``t_v(n)`` in seconds: call it with ``n``. ``a``, ``b``: the line; ``table``: ``t_v(1) ..
    t_v(len(table))`` with the measured shapes applied, up to the largest measured size (empty: the line alone;
    beyond it: the line, at least the table's last)."""

    a: float
    b: float
    table: tuple = ()

    def __call__(self, n: int) -> float:
        if 0 < n <= len(self.table):
            return self.table[n - 1]
        line = self.a + self.b * n
        return max(line, self.table[-1]) if self.table else line

    @classmethod
    def of(cls, a: float, b: float, shapes: Mapping[int, float],
           weights: Optional[Mapping[int, float]] = None) -> "VerifyCost":
        """The line with ``shapes`` (by pass size: the median shape of its passes, where enough were seen; a
        plain pass's is 1 by definition) at the level the line gives passes weighted ``weights`` (by size;
        None: the line's plain step), as the module docstring says."""
        shapes = {n: x for n, x in shapes.items() if n > 1}
        if not shapes:
            return cls(a, b)
        shapes[1] = 1.0
        level = a + b
        if weights is not None:
            seen = [(w, n, shapes[n]) for n, w in weights.items() if n in shapes and w > 0]
            if seen:
                level = sum(w * (a + b * n) for w, n, _ in seen) / sum(w * x for w, _, x in seen)
        top = max(shapes)
        table, above = [0.0] * top, math.inf  # from the top: the nearest measured size above caps the line
        for n in range(top, 0, -1):
            x = shapes.get(n)
            table[n - 1] = above = level * x if x is not None else min(a + b * n, above)
        floor = 0.0
        for i, t in enumerate(table):  # from the bottom: never below a shorter pass
            table[i] = floor = max(floor, t)
        return cls(a, b, tuple(table))


class SizeShapes:
    """Recent shapes of passes (seconds over a plain pass's near them), by pass size (2 .. ``n_max``); only the
    sizes seen are held."""

    def __init__(self, n_max: int, forget: float = 1.0):
        self.n_max = n_max
        self._seen: dict[int, deque] = {}
        self._median: dict[int, float] = {}
        self._weights: dict[int, float] = {}
        self._forget = forget

    def count(self, n: int) -> None:
        """A pass of ``n`` tokens ran (every pass: what the level is fitted over, forgotten as the line's)."""
        for size in self._weights:
            self._weights[size] *= self._forget
        if 0 < n <= self.n_max:
            self._weights[n] = self._weights.get(n, 0.0) + 1.0

    def weights(self) -> dict[int, float]:
        return dict(self._weights)

    def add(self, n: int, shape: float) -> None:
        if not 1 < n <= self.n_max or shape <= 0:
            return
        seen = self._seen.setdefault(n, deque(maxlen=SIZE_WINDOW))
        seen.append(shape)
        if len(seen) >= SIZE_MIN:
            self._median[n] = statistics.median(seen)

    def medians(self) -> dict[int, float]:
        """The median shape by size, for the sizes with at least ``SIZE_MIN`` passes."""
        return dict(self._median)
