"""Completion benchmark: editors' requests timed as the editor waits for them, plain against speculative.

Method (as ``bench.py``'s): one warm-up request per mode, then for every prompt and repeat a plain request and one
per proposer, in an order rotated each repeat, each from a cold cache (the whole prompt prefilled; lookup remembers
no earlier request). Each completion ends where Tandem's ``/infill`` would end it (``fimrequest.py``: end of
generation, ``n_predict``, the suffix rule unless ``stop_at_suffix`` is off, the prompt's ``n_indent``). A
request's time runs from the start of its prefill to the token that ended the completion, what an editor waits
for; time to first token, to its first token. Greedy (so every speculative completion must equal the plain one, cut
at the same token). The reference ``perfect`` (``replay.py``) drafts plain's own completion of the same prompt and
repeat at K = k_max: verify passes alone, the fastest any drafter could be. Reported: p50 and p95 over every request
of a mode (prompts × repeats), per-prompt medians over the repeats, and ratios: ``p50_ratio`` = speculative p50 /
plain p50 (below 1 is faster), a prompt's ``speedup`` = its plain median / its speculative median (above 1 is
faster); which rule ended each completion.
"""

from __future__ import annotations

import statistics
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

import numpy as np

from app.engine.decoding.infillcut import Rules
from app.engine.events import StepEvent
from app.engine.llama.backend import ContextFullError
from app.engine.loop import GenConfig
from app.engine.pair import Pair
from app.engine.stats import pool
from app.engine.summary import Summary
from app.lab.bench import PRIVATE, public_dict
from app.lab.parting import divergence
from app.lab.fimrequest import Request, infill_rules, request
from app.lab.prompts import Prompt, require_fim
from app.lab.replay import PERFECT, ReplayProposer

SLOW = 0.97  # a prompt whose speculative median is slower than this share of plain speed is flagged
PLAIN = "plain"
WARMUP_TOKENS = 8


# --- arithmetic (pure) ------------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The q-th percentile, linear between the closest ranks (numpy's default); None for no values."""
    return float(np.percentile(values, q)) if len(values) else None


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


@dataclass(frozen=True)
class Times:
    """p50/p95 of one mode's request times and times to first token, over every request."""

    p50_s: Optional[float]
    p95_s: Optional[float]
    ttft_p50_s: Optional[float]
    ttft_p95_s: Optional[float]
    prefill_p50_s: Optional[float]
    requests: int

    @classmethod
    def of(cls, totals: Sequence[float], ttfts: Sequence[float], prefills: Sequence[float]) -> "Times":
        return cls(percentile(totals, 50), percentile(totals, 95), percentile(ttfts, 50), percentile(ttfts, 95),
                   percentile(prefills, 50), len(totals))

    def to_dict(self) -> dict:
        return public_dict(self)


def times(requests: Sequence[Request]) -> Times:
    return Times.of([r.total_s for r in requests], [r.ttft_s for r in requests if r.ttft_s is not None],
                    [r.prefill_s for r in requests])


def ends(requests: Sequence[Request]) -> dict:
    """How many requests each rule ended ({"suffix": 7, "eog": 4, ...})."""
    return dict(Counter(str(r.end) for r in requests))


def slow_prompts(speedups: dict[str, Optional[float]], floor: float = SLOW) -> list[str]:
    """The prompts whose speculative median is slower than ``floor`` × plain speed."""
    return [pid for pid, s in speedups.items() if s is not None and s < floor]


# --- results ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModeRow:
    """One proposer (or the reference) on one prompt (medians over the repeats; acceptance pooled)."""

    median_s: float
    ttft_s: Optional[float]
    tokens: int  # the first run's completion (it differs from plain's only where a near-tie or a fault parted them)
    end: str  # the first run's Ending: which rule ended its completion
    speedup: Optional[float]  # plain median / this median
    slow: bool
    acceptance_rate: float
    mean_accepted: float
    drafted: int
    accepted: int
    lookup_drafted: int
    lookup_accepted: int
    paused: Optional[float]
    t_draft_s: float  # summed over the repeats
    t_verify_s: float
    identical: bool
    mismatch: Optional[dict]  # {"position", "gap", "near_tie"} of the first run that differs
    runs_s: list
    steps: list  # the first run's steps: STEP_FIELDS each, where the time went
    pooled: Summary = field(default_factory=Summary, repr=False, metadata=PRIVATE)

    def to_dict(self) -> dict:
        return public_dict(self)


STEP_FIELDS = ("drafted", "accepted", "lookup_drafted", "lookup_accepted", "t_draft_s", "t_verify_s", "paused")


def step_row(ev: StepEvent) -> list:
    """A step as STEP_FIELDS: what was drafted and by whom, what was kept, what drafting and the verify pass
    cost (times rounded to 0.1 ms)."""
    return [ev.drafted, ev.accepted, ev.lookup, ev.lookup_accepted, round(ev.t_draft, 4), round(ev.t_verify, 4),
            ev.paused]


@dataclass(frozen=True)
class PromptRow:
    id: str
    category: str
    prompt: str  # its label
    prompt_tokens: int
    tokens: int  # the plain completion's
    end: str  # which rule ended the plain completion (the first run's Ending)
    plain_s: float  # median
    plain_ttft_s: Optional[float]
    plain_runs_s: list
    modes: dict  # proposer (and the reference) -> ModeRow

    def to_dict(self) -> dict:
        return dict(public_dict(self), modes={k: v.to_dict() for k, v in self.modes.items()})


@dataclass(frozen=True)
class ModeSummary:
    """One proposer (or the reference) over every prompt."""

    times: Times
    p50_ratio: Optional[float]  # speculative p50 / plain p50
    p95_ratio: Optional[float]
    ttft_p50_ratio: Optional[float]
    median_speedup: Optional[float]  # over the prompts' speedups
    min_speedup: Optional[float]
    slow: list  # prompt ids below SLOW
    acceptance_rate: float
    mean_accepted: float
    lookup_share: Optional[float]
    paused: Optional[float]
    identical: bool
    mismatches: list  # {"prompt", "position", "gap", "near_tie", "plain_tokens", "tokens"}
    ends: dict  # Ending -> requests it ended

    def to_dict(self) -> dict:
        return dict(public_dict(self), times=self.times.to_dict())

    @property
    def other_lengths(self) -> list:
        """The mismatches whose completion has another length than plain's: their times compare other texts."""
        return [m for m in self.mismatches if m["tokens"] != m["plain_tokens"]]


@dataclass(frozen=True)
class RequestBenchResult:
    """``to_dict`` is the JSON of ``bench --suite fim`` (and of prompt files with FIM lines)."""

    n_predict: int
    k: object
    proposers: list
    repeats: int
    plain: Times
    modes: dict  # proposer (and the reference) -> ModeSummary
    per_prompt: list  # PromptRow
    skipped: list
    partial: bool
    stop_at_suffix: bool = True
    reference: Optional[str] = None  # PERFECT, or None
    k_reference: Optional[int] = None  # the reference's fixed K (k_max)
    plain_ends: dict = field(default_factory=dict)  # Ending -> plain requests it ended

    @property
    def named(self) -> list:
        """The modes in the tables: the proposers, then the reference."""
        return self.proposers + ([self.reference] if self.reference else [])

    @property
    def p50_ratio(self) -> Optional[float]:
        first = self.modes.get(self.proposers[0])
        return first.p50_ratio if first else None

    def to_dict(self) -> dict:
        return {"kind": "requests", "n_predict": self.n_predict, "k": self.k, "proposers": self.proposers,
                "reference": self.reference, "k_reference": self.k_reference, "stop_at_suffix": self.stop_at_suffix,
                "repeats": self.repeats, "p50_ratio": self.p50_ratio, "plain": self.plain.to_dict(),
                "plain_ends": self.plain_ends,
                "modes": {k: v.to_dict() for k, v in self.modes.items()},
                "per_prompt": [p.to_dict() for p in self.per_prompt], "skipped": self.skipped,
                "partial": self.partial, "slow_floor": SLOW, "step_fields": list(STEP_FIELDS)}


def _mode_row(pair: Pair, tokens: list[int], plain: list[Request], runs: list[Request]) -> ModeRow:
    base = statistics.median(r.total_s for r in plain)
    med = statistics.median(r.total_s for r in runs)
    s = pool([r.stats for r in runs])
    speedup = ratio(base, med)
    bad = next((r for r in runs if r.tokens != plain[0].tokens), None)
    mismatch = None
    if bad is not None:
        mismatch = divergence(pair, tokens, plain[0].tokens, bad.tokens)
    ttfts = [r.ttft_s for r in runs if r.ttft_s is not None]
    return ModeRow(median_s=med, ttft_s=statistics.median(ttfts) if ttfts else None, tokens=len(runs[0].tokens),
                   end=str(runs[0].end), speedup=speedup,
                   slow=speedup is not None and speedup < SLOW, acceptance_rate=s.acceptance_rate,
                   mean_accepted=s.mean_accepted, drafted=s.drafted, accepted=s.accepted,
                   lookup_drafted=s.lookup_drafted, lookup_accepted=s.lookup_accepted, paused=s.paused_share,
                   t_draft_s=s.t_draft, t_verify_s=s.t_verify, identical=bad is None, mismatch=mismatch,
                   runs_s=[r.total_s for r in runs], steps=[step_row(ev) for ev in runs[0].steps], pooled=s)


def summarize(name: str, rows: Sequence[PromptRow], plain: Times, requests: Sequence[Request]) -> ModeSummary:
    t = times(requests)
    mine = {r.id: r.modes[name] for r in rows if name in r.modes}
    plain_tokens = {r.id: r.tokens for r in rows}
    s = pool([m.pooled for m in mine.values()])
    speedups = [m.speedup for m in mine.values() if m.speedup is not None]
    return ModeSummary(
        times=t, p50_ratio=ratio(t.p50_s, plain.p50_s), p95_ratio=ratio(t.p95_s, plain.p95_s),
        ttft_p50_ratio=ratio(t.ttft_p50_s, plain.ttft_p50_s),
        median_speedup=statistics.median(speedups) if speedups else None,
        min_speedup=min(speedups) if speedups else None,
        slow=slow_prompts({pid: m.speedup for pid, m in mine.items()}),
        acceptance_rate=s.acceptance_rate, mean_accepted=s.mean_accepted, lookup_share=s.lookup_share,
        paused=s.paused_share, identical=all(m.identical for m in mine.values()),
        mismatches=[{"prompt": pid, **m.mismatch, "plain_tokens": plain_tokens[pid], "tokens": m.tokens}
                    for pid, m in mine.items() if m.mismatch], ends=ends(requests))


# --- the run ----------------------------------------------------------------------------------------------------

def run_requests(pair: Pair, prompts: Sequence[Prompt], gen: GenConfig, proposers: Sequence[str],
                 repeats: int = 1, warmup: bool = True,
                 progress: Optional[Callable[[int, int, str], None]] = None,
                 cancel: Optional[threading.Event] = None,
                 keep: Optional[list] = None, stop_at_suffix: bool = True,
                 reference: Optional[str] = None) -> RequestBenchResult:
    """Every prompt as an editor's request, plain and with each proposer (``gen`` with its ``proposer``
    replaced), interleaved, each completion ended as ``/infill`` ends it (``stop_at_suffix``: its suffix rule);
    ``reference``: PERFECT also times the perfect drafter on each repeat's plain completion, at K = ``gen.k_max``;
    ``keep``: a list that receives (prompt id, mode, Request) of every timed request."""
    if not gen.sampler.greedy:
        raise ValueError("the completion benchmark is greedy (every completion checked against plain decoding); "
                         "use temperature 0")
    if reference not in (None, PERFECT):
        raise ValueError(f"the completion benchmark's reference is {PERFECT!r}, not {reference!r}")
    cfgs = {PLAIN: GenConfig(max_tokens=gen.max_tokens, sampler=gen.sampler, speculative=False)}
    cfgs.update({name: GenConfig(max_tokens=gen.max_tokens, sampler=gen.sampler, k=gen.k, k_max=gen.k_max,
                                 p_min=gen.p_min, proposer=name) for name in proposers})
    if reference == PERFECT:
        cfgs[PERFECT] = GenConfig(max_tokens=gen.max_tokens, sampler=gen.sampler, k=gen.k_max, k_max=gen.k_max)
    named = list(proposers) + ([PERFECT] if reference else [])
    require_fim(pair, prompts)
    encoded, skipped = [], []
    for p in prompts:
        try:
            encoded.append((p, p.tokens(pair, gen.max_tokens), infill_rules(p, stop_at_suffix)))
        except ContextFullError as exc:  # reported and left out, as bench does
            skipped.append({"id": p.id, "category": p.category, "error": str(exc)})
    if not encoded:
        raise ValueError(f"no prompt can run: {skipped[0]['error']}" if skipped else "no prompts")
    if warmup:
        warm: dict[str, list[Request]] = {PLAIN: []}
        for mode, cfg in cfgs.items():
            warm.setdefault(mode, []).append(_one(pair, encoded[0][1], replace(cfg, max_tokens=WARMUP_TOKENS),
                                                  encoded[0][2], mode, warm[PLAIN]))
    modes = list(cfgs)
    total, done = len(encoded) * repeats * len(modes), 0
    rows: list[PromptRow] = []
    runs: dict[str, list[Request]] = {m: [] for m in modes}
    partial = False
    for prompt, tokens, rules in encoded:
        mine: dict[str, list[Request]] = {m: [] for m in modes}
        for r in range(repeats):
            for mode in rotation(modes, r):
                if cancel is not None and cancel.is_set():
                    partial = True
                    break
                got = _one(pair, tokens, cfgs[mode], rules, mode, mine[PLAIN])
                mine[mode].append(got)
                if keep is not None:
                    keep.append((prompt.id, mode, got))
                done += 1
                if progress:
                    progress(done, total, f"{prompt.id} {mode}")
            if partial:
                break
        if any(not v for v in mine.values()):
            break
        for m in modes:
            runs[m] += mine[m]
        plain = mine[PLAIN]
        ttfts = [x.ttft_s for x in plain if x.ttft_s is not None]
        rows.append(PromptRow(id=prompt.id, category=prompt.category, prompt=prompt.label, prompt_tokens=len(tokens),
                              tokens=len(plain[0].tokens), end=str(plain[0].end),
                              plain_s=statistics.median(x.total_s for x in plain),
                              plain_ttft_s=statistics.median(ttfts) if ttfts else None,
                              plain_runs_s=[x.total_s for x in plain],
                              modes={n: _mode_row(pair, tokens, plain, mine[n]) for n in named}))
        if partial:
            break
    plain_times = times(runs[PLAIN])
    return RequestBenchResult(n_predict=gen.max_tokens, k=gen.k, proposers=list(proposers), repeats=repeats,
                              plain=plain_times,
                              modes={n: summarize(n, rows, plain_times, runs[n]) for n in named if rows},
                              per_prompt=rows, skipped=skipped, partial=partial, stop_at_suffix=stop_at_suffix,
                              reference=reference, k_reference=gen.k_max if reference else None,
                              plain_ends=ends(runs[PLAIN]))


def rotation(modes: Sequence[str], r: int) -> list[str]:
    """Repeat ``r``'s order: the modes rotated by ``r``, but the reference right after plain where the rotation
    would put it first (it replays that repeat's plain completion)."""
    order = list(modes[r % len(modes):]) + list(modes[:r % len(modes)])
    if PERFECT in order and order.index(PERFECT) < order.index(PLAIN):
        order.remove(PERFECT)
        order.insert(order.index(PLAIN) + 1, PERFECT)
    return order


def _one(pair: Pair, tokens: list[int], cfg: GenConfig, rules: Rules, mode: str, plain: list[Request]) -> Request:
    """One timed request of ``mode``; the reference replays ``plain``'s latest completion (this repeat's)."""
    return request(pair, tokens, cfg, rules, ReplayProposer(plain[-1].tokens) if mode == PERFECT else None)
