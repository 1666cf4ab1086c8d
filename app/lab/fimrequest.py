"""One timed editor's request of the completion bench (``fimbench.py``): a completion that ends where Tandem's
``/infill`` would end it, timed to the token that ended it.

``/infill`` ends a completion by llama.cpp's rules plus the suffix rule (``engine/decoding/infillcut.py``). The
bench applies the rules a request with only the prompt's own fields gets by default: the suffix rule
(``stop_at_suffix``, on unless turned off) and the prompt's ``n_indent`` if its line gave one. No stop strings
(an editor's request has none by default) and no ``t_max_predict_ms``: a time limit would end plain and
speculative completions at different places, and the rules read the target's tokens in order, so greedy plain
and speculative runs are cut at the same token.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from app.engine.decoding.infillcut import InfillCut, Rules, StopType, SuffixStop
from app.engine.drafters.protocol import Proposer
from app.engine.events import DoneEvent, StepEvent, StopReason, TokenEvent
from app.engine.loop import GenConfig, generate
from app.engine.names import StrEnum
from app.engine.pair import Pair
from app.engine.summary import Summary
from app.lab.prompts import Prompt


class Ending(StrEnum):
    """What ended a completion."""

    SUFFIX = "suffix"  # the model began copying the suffix's first line (stop_at_suffix): cut before the copy
    INDENT = "n_indent"  # a line shallower than the prompt's n_indent
    EOG = "eog"  # the model's end-of-generation token
    LIMIT = "limit"  # n_predict (or the context) ran out


def infill_rules(prompt: Prompt, stop_at_suffix: bool = True) -> Rules:
    """The rules ``/infill`` ends this prompt's completion by, given the prompt's fields and nothing else; an
    ordinary prompt (no FIM fields) ends at end of generation or n_predict alone, as ``/v1/completions``."""
    fim = prompt.infill
    if fim is None:
        return Rules()
    return Rules(n_indent=fim.n_indent, suffix=SuffixStop.of(fim.prefix, fim.suffix) if stop_at_suffix else None)


def ending(cut: InfillCut) -> Ending:
    """Which rule ended the completion, once the cut has read it all (``finish`` called unless it ended)."""
    if cut.stop == StopType.WORD:  # no stop strings here: the suffix's copy
        return Ending.SUFFIX
    if cut.stop == StopType.LIMIT:  # no time limit here: the indentation
        return Ending.INDENT
    return Ending.EOG if cut.stop == StopType.EOS else Ending.LIMIT


@dataclass
class Request:
    """One timed request."""

    tokens: list[int]  # the completion's tokens, through the one that ended it
    total_s: float  # prefill + decode: until the token that ended the completion
    ttft_s: Optional[float]  # until the first token (None: the reply was empty)
    prefill_s: float  # the target's prefill and the proposer's reading of the prompt
    stats: Summary
    steps: list[StepEvent] = field(default_factory=list)
    end: Ending = Ending.LIMIT
    text: str = ""  # the completion as /infill answers it (cuts applied)


def request(pair: Pair, tokens: Sequence[int], cfg: GenConfig, rules: Optional[Rules] = None,
            proposer: Optional[Proposer] = None) -> Request:
    """One request from a cold cache, as an editor's first request at a new place would find the server, ended
    by ``rules`` as ``/infill`` ends it: once a rule ends the completion, the clock stops at that token and the
    engine's stop switch ends the generation at the step's end, without another pass (as ``/infill`` stops it);
    the rest of that pass's tokens are not read (the statistics count the pass). ``rules``: None ends at end of
    generation or n_predict alone. ``proposer``: drafts instead of the pair's own for ``cfg``
    (the bench's references)."""
    pair.reset(lookup=True)
    prefill = [0.0]
    ttft: Optional[float] = None
    ended_s: Optional[float] = None
    done: Optional[DoneEvent] = None
    steps: list[StepEvent] = []
    kept: list[int] = []
    cut = InfillCut(rules or Rules())
    stop = threading.Event()
    t0 = time.perf_counter()
    on_prefill = lambda s: prefill.__setitem__(0, s)  # noqa: E731
    events = pair.generate(tokens, cfg, stop=stop, on_prefill=on_prefill) if proposer is None else \
        generate(pair.target, tokens, cfg, proposer, stop=stop, on_prefill=on_prefill)
    for ev in events:
        if isinstance(ev, TokenEvent):
            if ended_s is not None:
                continue
            if ttft is None:
                ttft = time.perf_counter() - t0
            kept.append(ev.token)
            if not cut.feed(ev.text):
                ended_s = time.perf_counter() - t0
                stop.set()
        elif isinstance(ev, StepEvent):
            steps.append(ev)
        elif isinstance(ev, DoneEvent):
            done = ev
    total = time.perf_counter() - t0
    assert done is not None
    if ended_s is None:
        cut.finish(eog=done.reason == StopReason.EOG)
    return Request(kept, ended_s if ended_s is not None else total, ttft, prefill[0], done.stats, steps, ending(cut),
                   cut.text)

