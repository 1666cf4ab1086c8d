"""A draft model's branches past one token: the draft continues each sibling (``tree.py``) on a branch sequence of
its own context.

A draft model's context is created as the target's is (``llama/treekv.py``: a unified KV cache with several
sequences). After the chain, sequence 0 holds the history and the chain's tokens; a sibling at draft position
``p`` sits at the history's length ``H`` plus ``p``, so its branch sequence gets sequence 0's cells below that
position (``TreeKv.fork``: metadata only), the sibling is decoded there, and the draft draws its next token from
the logits, decodes it, and so on. The branches of one depth go in one ``llama_decode`` (``TreeKv.decode_on``).
Afterwards every branch sequence is removed, so sequence 0 and ``model.cached`` are exactly as after the chain.

Each tail token is drawn as the chain's are (``draftmodel.py``): the argmax after the repeat penalty over its
path's window at temperature 0, a draw from its ``q`` at T > 0, the Gumbel-max of ``q`` with the noise of its
absolute position under the coupled rule; so it is a draw from its ``q`` given its path, the only child of the node
before it, which is what the tree rules need (``decoding/tree.py``). Whether a branch goes on depends only on
``q`` (its top probability against ``p_min``), the room under the chain's K, and an end of generation drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

import numpy as np

from app.engine.decoding.coupled import GumbelNoise
from app.engine.decoding.sampling import SamplerSettings
from app.engine.decoding.tree import Sibling
from app.engine.drafters.draftmodel import draw
from app.engine.llama.treekv import TreeKv


@dataclass
class _Branch:
    index: int  # the sibling's, in the step's siblings
    seq: int  # its branch sequence
    room: int  # tail tokens it may get
    pos: int  # the absolute position of ``last``
    last: int  # the token to decode next
    recent: list[int]  # the penalty's recent tokens along its path (empty: no penalty)
    tokens: list[int] = field(default_factory=list)
    q: list[np.ndarray] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Drawing:
    """How the chain drew its tokens, for the tails to draw theirs the same way."""

    sampler: SamplerSettings
    rng: np.random.Generator
    sample: bool
    noise: Optional[GumbelNoise]
    p_min: float
    is_eog: Callable[[int], Optional[bool]]


def grow_tails(kv: TreeKv, siblings: Sequence[Sibling], recents: Sequence[list[int]], base: int, depth: int,
               k: int, how: Drawing) -> list[Sibling]:
    """``siblings`` (``recents``: the penalty's recent tokens before each; ``base``: the history's length) with up
    to ``depth`` tail tokens each, none deeper than ``k`` (the chain's K)."""
    live: list[_Branch] = []
    for i, s in enumerate(siblings):
        room = min(depth, k - 1 - s.pos)
        if room <= 0 or len(live) + 1 >= kv.seqs or how.is_eog(s.token):
            continue
        seq = len(live) + 1
        kv.fork(seq, base + s.pos)
        live.append(_Branch(i, seq, room, base + s.pos, s.token, recents[i] + [s.token] if recents[i] else []))
    done: list[_Branch] = []
    try:
        while live:
            logits = kv.decode_on([(b.seq, b.last, b.pos) for b in live])
            if logits is None:  # no room left in the cache: the tails end here
                break
            rows = np.array(logits, copy=True)
            for b, row in zip(live, rows):
                _draw(b, row, how)
            done += [b for b in live if len(b.tokens) >= b.room or b.pos < 0]
            live = [b for b in live if len(b.tokens) < b.room and b.pos >= 0]
    finally:
        kv.drop()
    out = list(siblings)
    for b in done + live:
        if b.tokens:
            out[b.index] = replace(siblings[b.index], tail=tuple(b.tokens), tail_q=tuple(b.q),
                                   tail_probs=tuple(b.probs))
    return out


def _draw(b: _Branch, logits: np.ndarray, how: Drawing) -> None:
    """The branch's next token after ``b.last`` (at ``b.pos + 1``), as the chain draws; ``b.pos`` = -1 where the
    branch ends (the draft's top probability under ``p_min``, or an end of generation drawn)."""
    at = b.pos + 1
    x, p_x, top, q = draw(logits, how.sampler, b.recent, how.rng, how.sample, how.noise, at)
    if top < how.p_min:
        b.pos = -1
        return
    b.tokens.append(x)
    b.probs.append(p_x)
    if q is not None:
        b.q.append(q)
    if b.recent:
        b.recent.append(x)
    b.pos, b.last = (-1 if how.is_eog(x) else at), x
