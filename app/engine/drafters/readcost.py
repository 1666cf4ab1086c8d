"""What a draft model costs to read history it has not seen, as measured: the steady read of two tokens after a
fully kept draft (``t_s``), each further token of a longer catch-up (``t_c``: after a lookup stretch, or the
prompt itself), and how long the combined drafter's runs between lookup stretches last. ``mix.reading`` turns
them into seconds; the draft-length controller weighs those seconds against what drafting could save in the
tokens a generation may still write (``DraftLength.hold``)."""

from __future__ import annotations

import weakref
from collections import deque

from app.engine.control.costs import lower_median
from app.engine.control.mix import reading
from app.engine.drafters.protocol import DraftSource

CATCH_PRIOR = 0.6  # before a catch-up was timed: reading a token costs this share of drafting one (a batch)
STEADY_PRIOR = 1.5  # … and reading two costs this many draft tokens (a 2-token batch)
# Where the draft model takes a copy of the target's cache (kvshare.py), a catch-up of any length is the copy
# (microseconds a cached token) and one token read, as after a fully kept draft: reading two costs about one
# draft token and each further one nothing.
SHARED_STEADY_PRIOR = 1.0
CATCH_MIN = 8  # catch-ups of at least this many tokens time the per-token cost (shorter ones are mostly overhead)


class ReadCosts:
    """What the draft model was timed reading unseen history (mix.reading's ``t_s`` and ``t_c``) and how long
    its runs between lookup stretches lasted (mix.choose's ``runs``), kept per draft model (``ReadCostBook``),
    so a generation starts from what the earlier ones measured."""

    def __init__(self, shared: bool = False) -> None:
        self.shared = shared  # the draft model takes the target's cache: the priors of a copy (SHARED_STEADY_PRIOR)
        self.priors = (SHARED_STEADY_PRIOR, 0.0) if shared else (STEADY_PRIOR, CATCH_PRIOR)  # shares of t_d
        self.steady: deque = deque(maxlen=8)  # recent seconds the draft model took to read 2 unseen tokens
        self.catch: deque = deque(maxlen=8)  # … and per further token read in a longer catch-up
        self.runs: deque = deque(maxlen=8)  # how many steps in a row the draft model drafted, run by run

    def reading(self, t_d: float) -> tuple[float, float]:
        """(``t_s``, ``t_c``): the lower medians of what was timed, else the priors' shares of a draft token."""
        t_s, t_c = lower_median(self.steady), lower_median(self.catch)
        return (t_s if t_s is not None else self.priors[0] * t_d, t_c if t_c is not None else self.priors[1] * t_d)

    def seconds(self, n: int, t_d: float) -> float:
        """What reading ``n`` unseen tokens is expected to cost (``mix.reading``)."""
        return reading(n, *self.reading(t_d))

    def timed(self, synced: int, t_sync: float) -> None:
        """Learn ``t_s`` (reading 2 tokens) and ``t_c`` (each further one) from a timed read of ``synced``
        tokens; ``t_c`` once a steady read was timed (it is what a longer read costs beyond it)."""
        if synced == 2 and t_sync > 0:
            self.steady.append(t_sync)
        t_s = lower_median(self.steady)
        if synced >= CATCH_MIN and t_sync > 0 and t_s is not None:
            self.catch.append(max(t_sync - t_s, 0.0) / (synced - 2))


class ReadCostBook:
    """The reading costs measured for each loaded draft model (forgotten with it), kept by whoever hands out the
    drafters (the Pair) so that they carry over from one generation to the next."""

    def __init__(self) -> None:
        self._costs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def of(self, model: DraftSource, shared: bool = False) -> ReadCosts:
        """``model``'s costs, apart while it takes the target's cache (``shared``) and while it reads for
        itself: a refused copy must not be priced as one."""
        return self._costs.setdefault(model, {}).setdefault(shared, ReadCosts(shared))
