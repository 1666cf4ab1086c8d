"""Several proposers benchmarked in one sitting: for every prompt and repeat, plain decoding and each proposer
run back to back (the order rotated each repeat), so that the proposers are compared on runs interleaved in
time rather than across runs minutes apart, on a machine whose speed drifts.

Each proposer's figures are computed as ``bench.py`` computes a single one's (speedup: per prompt, median
over repeats against the median of the same prompt's plain runs; the summary: the median over prompts). The
comparison adds, per prompt, the better *single* drafter (``draft`` or ``lookup``, whichever was faster there;
the one of them that ran, if only one did) and the combined drafter's (``auto``) speedup as a share of it,
with a percentile bootstrap interval over the repeats (each draw resamples every proposer's runs; Efron and
Tibshirani, An Introduction to the Bootstrap, 1993, ch. 13): a few runs of 30–120 tokens each decide it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np

from app.engine.drafters.kvshare import in_use
from app.engine.loop import GenConfig
from app.engine.names import AUTO_K
from app.engine.pair import Pair
from app.engine.stats import median
from app.lab import oracle
from app.lab.bench import (BenchResult, RunResult, _aggregate, _prompt_result, draft_cache, encode, measure,
                           shares_so_far)
from app.lab.prompts import Prompt
from app.numfmt import fmt

SINGLE = ("draft", "lookup")  # the single drafters auto is compared with
COMBINED = "auto"
INTERVAL, DRAWS = 0.9, 2000  # the bootstrap interval of auto / the better single drafter (3 repeats or more)


@dataclass(frozen=True)
class DrafterRow:
    """One prompt: each proposer's speedup over the plain runs of the same sitting."""

    id: str
    speedups: dict  # proposer -> speedup (None without plain tokens/s)
    best_single: Optional[str] = None  # the faster of draft and lookup here (of those that ran)
    auto_ratio: Optional[float] = None  # auto's speedup / the better single drafter's (with auto)
    bound: Optional[float] = None  # the hindsight bound's speedup (oracle.py; T = 0 with auto only): an estimate
    bound_gain: Optional[float] = None  # that bound / the better single drafter's own hindsight bound
    auto_interval: Optional[tuple] = None  # (low, high): INTERVAL bootstrap interval of auto_ratio

    def to_dict(self) -> dict:
        return {"id": self.id, "speedups": dict(self.speedups), "best_single": self.best_single,
                "auto_ratio": self.auto_ratio, "auto_interval": list(self.auto_interval or ()) or None,
                "bound": self.bound, "bound_gain": self.bound_gain}


@dataclass(frozen=True)
class DrafterComparison:
    """Per proposer, what ``run_bench`` would report for it alone; per prompt, the comparison."""

    results: dict  # proposer -> BenchResult
    rows: list  # DrafterRow
    partial: bool = False

    @property
    def auto_ratio(self) -> Optional[float]:
        """The median over prompts of auto's speedup / the better single drafter's."""
        return median([r.auto_ratio for r in self.rows])

    @property
    def auto_ratio_min(self) -> Optional[float]:
        ratios = [r.auto_ratio for r in self.rows if r.auto_ratio is not None]
        return min(ratios) if ratios else None

    @property
    def median_ratio(self) -> Optional[float]:
        """Auto's median speedup over the suite / the better of the single drafters' median speedups."""
        singles = [self.results[p].speedup for p in SINGLE if p in self.results]
        singles = [v for v in singles if v]
        auto = self.results[COMBINED].speedup if COMBINED in self.results else None
        return auto / max(singles) if auto and singles else None

    def to_dict(self) -> dict:
        return {"proposers": {p: r.to_dict() for p, r in self.results.items()},
                "per_prompt": [r.to_dict() for r in self.rows], "auto_ratio": self.auto_ratio,
                "auto_ratio_min": self.auto_ratio_min, "median_ratio": self.median_ratio, "partial": self.partial}


def compare_drafters(pair: Pair, prompts: Sequence[Prompt], gen: GenConfig, proposers: Sequence[str],
                     repeats: int = 1, warmup: bool = True,
                     progress: Optional[Callable[[int, int, str], None]] = None,
                     cancel: Optional[threading.Event] = None) -> DrafterComparison:
    """Plain decoding and every proposer in ``proposers`` on each prompt, interleaved (see the module doc)."""
    if len(set(proposers)) != len(proposers) or not proposers:
        raise ValueError(f"give each proposer once, not {list(proposers)}")
    plain_cfg = GenConfig(max_tokens=gen.max_tokens, sampler=gen.sampler, speculative=False)
    cfgs = {p: replace(gen, proposer=p) for p in proposers}
    encoded, skipped = encode(pair, prompts)
    if warmup:
        warm = min(32, gen.max_tokens)
        for cfg in [plain_cfg, *cfgs.values()]:
            measure(pair, encoded[0][1], replace(cfg, max_tokens=warm))
    modes = ["plain", *proposers]
    total, done, partial = len(encoded) * repeats * len(modes), 0, False
    rows: dict = {p: [] for p in proposers}
    bounds: list = []
    index_bytes: Optional[int] = None
    shared_from = shares_so_far(pair)
    for prompt, tokens in encoded:
        runs: dict = {m: [] for m in modes}
        for r in range(repeats):
            shift = r % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                if cancel is not None and cancel.is_set():
                    partial = True
                    break
                result: RunResult = measure(pair, tokens, plain_cfg if mode == "plain" else cfgs[mode])
                runs[mode].append(result)
                if mode == COMBINED:
                    index_bytes = max(index_bytes or 0, pair.lookup_index.nbytes())
                done += 1
                if progress:
                    progress(done, total, f"{prompt.id} {mode}")
        if partial and not all(runs.values()):
            break
        for p in proposers:
            rows[p].append(_prompt_result(pair, prompt, tokens, runs["plain"], runs[p], cfgs[p]))
        bounds.append(hindsight_bound(pair, tokens, runs["plain"][0].tokens, cfgs.get(COMBINED)))
        if partial:
            break
    results = {p: replace(_aggregate(rows[p], cfgs[p], partial, None, skipped, index_bytes if p == COMBINED else None),
                          draft_cache=draft_cache(pair, cfgs[p], shared_from)) for p in proposers}
    rows_out = [replace(r, bound=b[0], bound_gain=b[1]) for r, b in zip(_compare(results), bounds)]
    return DrafterComparison(results=results, rows=rows_out, partial=partial)


def hindsight_bound(pair: Pair, prompt: list, output: list, cfg: Optional[GenConfig]) -> tuple:
    """(the hindsight bound's speedup, its gain over the better single drafter's own hindsight bound) for one
    prompt (oracle.py), with the costs auto K measured in this sitting, auto's draft model reading all it has
    not seen; Nones unless auto ran greedy at auto K with a draft model and the costs are measured."""
    if cfg is None or not cfg.sampler.greedy or cfg.k != AUTO_K or pair.draft is None or not output:
        return None, None
    length = pair.draft_length(cfg)
    if length is None or not length.measured():
        return None, None
    tv = length.verify()
    t_d = length.t_d or 0.0
    t_s, t_c = pair.read_costs.of(pair.draft, in_use(pair.kv_share)).reading(t_d)
    lookup = oracle.lookup_kept(prompt, output, cfg.k_max)
    draft = oracle.draft_kept(pair, prompt, output, cfg.k_max)
    none = [0] * len(output)
    mixed = oracle.best_time(lookup, draft, oracle.StepCosts(tv, t_d, t_s, t_c), cfg.k_max)
    single = min(oracle.best_time(lookup, none, oracle.StepCosts(tv, t_d), cfg.k_max),
                 oracle.best_time(none, draft, oracle.StepCosts(tv, t_d, t_s, t_c), cfg.k_max))
    return len(output) * tv(1) / mixed, single / mixed


def _compare(results: dict) -> list[DrafterRow]:
    first: BenchResult = next(iter(results.values()))
    out = []
    for i, row in enumerate(first.per_prompt):
        speedups = {p: r.per_prompt[i].speedup for p, r in results.items()}
        singles = {p: speedups[p] for p in SINGLE if speedups.get(p) is not None}
        best = max(singles, key=singles.__getitem__) if singles else None
        ratio = None
        if best is not None and speedups.get(COMBINED) is not None and singles[best]:
            ratio = speedups[COMBINED] / singles[best]
        interval = None
        if ratio is not None:
            runs = {p: r.per_prompt[i].spec_runs for p, r in results.items()}
            interval = ratio_interval(runs[COMBINED], [runs[p] for p in singles])
        out.append(DrafterRow(id=row.id, speedups=speedups, best_single=best, auto_ratio=ratio,
                              auto_interval=interval))
    return out


def ratio_interval(auto: Sequence[float], singles: Sequence[Sequence[float]],
                   seed: int = 0) -> Optional[tuple]:
    """The INTERVAL percentile bootstrap interval of median(auto) / the largest median(single), from every
    proposer's runs (tokens/s, each resampled with replacement in every draw; the plain runs they share
    cancel); None with fewer than 3 runs of any."""
    if not singles or any(len(r) < 3 for r in (auto, *singles)):
        return None
    rng = np.random.default_rng(seed)
    medians = lambda runs: np.median(rng.choice(np.asarray(runs, float), (DRAWS, len(runs))), axis=1)  # noqa: E731
    ratios = medians(auto) / np.max([medians(r) for r in singles], axis=0)
    low, high = np.quantile(ratios, [(1 - INTERVAL) / 2, (1 + INTERVAL) / 2])
    return float(low), float(high)


def format_comparison(c: DrafterComparison) -> str:
    """The per-prompt table: each proposer's speedup, the better single drafter, auto / it."""
    names = list(c.results)
    both = any(r.auto_ratio is not None for r in c.rows)
    bound = any(r.bound is not None for r in c.rows)
    spread = any(r.auto_interval is not None for r in c.rows)
    head = f"{'prompt':<20} {'plain t/s':>9} " + " ".join(f"{p:>8}" for p in names) \
        + (f" {'best single':>11} {'auto/best':>9}" if both else "") + (f" {'90% range':>9}" if spread else "") \
        + (f" {'bound':>7} {'gain':>5}" if bound else "")
    lines = [head, "-" * len(head)]
    first = next(iter(c.results.values()))
    for i, row in enumerate(c.rows):
        cells = " ".join(f"{fmt(row.speedups[p], '.2f', 'x'):>8}" for p in names)
        span = "{:.2f}–{:.2f}".format(*row.auto_interval) if row.auto_interval else "-"
        tail = (f" {row.best_single or '-':>11} {fmt(row.auto_ratio):>9}" if both else "") \
            + (f" {span:>9}" if spread else "") \
            + (f" {fmt(row.bound, '.2f', 'x'):>7} {fmt(row.bound_gain):>5}" if bound else "")
        lines.append(f"{row.id[:20]:<20} {fmt(first.per_prompt[i].baseline_tps, '.1f'):>9} {cells}{tail}")
    lines.append("-" * len(head))
    cells = " ".join(f"{fmt(c.results[p].speedup, '.2f', 'x'):>8}" for p in names)
    gain = median([r.bound_gain for r in c.rows])
    tail = (f" {'':>11} {fmt(c.auto_ratio):>9}" if both else "") + (f" {'':>9}" if spread else "") \
        + (f" {fmt(median([r.bound for r in c.rows]), '.2f', 'x'):>7} {fmt(gain):>5}" if bound else "")
    lines.append(f"{'median':<20} {fmt(first.baseline_tps, '.1f'):>9} {cells}{tail}")
    if both:
        lines.append(f"auto / the better single drafter: median {fmt(c.auto_ratio)}, lowest {fmt(c.auto_ratio_min)} "
                     f"(per prompt, runs interleaved in one sitting); auto's median speedup / the better single "
                     f"drafter's median: {fmt(c.median_ratio)}")
    if spread:
        lines.append("90% range: of auto / best, a bootstrap over the repeats (every proposer's runs resampled)")
    if bound:
        lines.append("bound: a chooser that knew what lookup and the draft model would get accepted at every step, "
                     "with the costs auto K measured here, the draft model paying what it reads (app/lab/oracle.py; "
                     "an estimate, not a run); "
                     "gain: that bound over the better single drafter's own hindsight bound (what choosing per step "
                     "can add at best)")
    same = {p: r.identical for p, r in c.results.items() if r.identical is not None}
    if same:
        lines.append("output identical to plain: " + ", ".join(f"{p} {'yes' if v else 'NO'}" for p, v in same.items()))
    return "\n".join(lines)

