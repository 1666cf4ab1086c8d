"""The Pair lab sweep: every candidate draft × every K on this machine, against interleaved plain baselines.

Method. Each candidate draft is loaded once. For every prompt (and repeat), a plain run of the target is
measured, then the candidate's speculative runs (one per K / p_min cell), with a fresh plain baseline before
every ``BASELINE_EVERY`` speculative runs, so each cell's speedup is taken against a baseline measured close in
time (background load drifts). Every run starts from a cold cache (``bench.measure``). Per prompt a cell
records speedup, acceptance, tokens per target pass, per-position acceptance and the measured costs c and v
with the bound they predict (``stats.leviathan_bound``); a cell's figures are medians over prompts, with the
min and max as the spread. Pure orchestration: no printing, no UI.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from app.engine import limits
from app.engine.llama.backend import BackendError, LoadOptions, Model
from app.lab.bench import PRIVATE, encode, measure, public_dict
from app.lab.prompts import Prompt
from app.lab.ranking import recommend, repeat_range
from app.engine.loop import DEFAULT_K_MAX, DEFAULT_P_MIN, GenConfig
from app.engine.pair import Pair, draft_options_for, open_draft
from app.engine.decoding.sampling import SamplerSettings
from app.engine.stats import costs, median, pool
from app.lab.result import SweepResult
from app.models import heads
from app.engine.summary import Summary
from app.engine.llama.vocab import IncompatiblePair, check
from app.engine.names import AUTO_K, ProposerName, Rule

BASELINE_EVERY = 4  # speculative runs between two plain baselines of the same prompt
QUICK_KS: tuple = (2, 4, 8)
FULL_KS: tuple = (1, 2, 3, 4, 6, 8, AUTO_K)
QUICK_MAX_TOKENS, FULL_MAX_TOKENS = 32, 128
QUICK_PROMPTS = ("code-fib", "chat-plants")
QUICK_REPEATS = 2  # two passes over the prompts: the repeat range says how far the machine's noise reaches

Progress = Callable[[int, int, str, Optional[float]], None]  # done, total, what, eta seconds


@dataclass(frozen=True)
class Candidate:
    """What drafts: a GGUF model (``path``), prompt lookup, the target's MTP head, or ``auto`` (model + lookup)."""
    id: str
    proposer: str = ProposerName.DRAFT
    path: Optional[str] = None

    @classmethod
    def model(cls, path: Union[str, Path]) -> "Candidate":
        return cls(id=_named(path), proposer=ProposerName.DRAFT, path=str(path))

    @classmethod
    def combined(cls, path: Union[str, Path]) -> "Candidate":  # lookup and this model, chosen per step
        return cls(id=f"auto ({_named(path)} + lookup)", proposer=ProposerName.AUTO, path=str(path))


def _named(path: Union[str, Path]) -> str:
    """A draft file's id: its stem, with what it is when it drafts from the target's layers ("x (EAGLE-3 head)")."""
    label = heads.label_of(path)
    return f"{Path(path).stem} ({label})" if label else Path(path).stem


LOOKUP = Candidate("lookup", ProposerName.LOOKUP, None)
MTP = Candidate("mtp", ProposerName.MTP, None)  # the target's own MTP head (targets that carry one)


def parse_ks(text: str) -> list:
    """'1,2,4,8' | '1-12' | 'auto' | '1-4,8,auto' → [1, 2, 3, 4, 8, 'auto'] (sorted, unique, auto last).
    Every value is checked against ``limits`` as it is read (``limits.k_list``), so a range like
    '1-1000000000' is refused before anything is built."""
    ks = set(limits.k_list(text))
    if not ks:
        raise ValueError("no K values given")
    return sorted(k for k in ks if k != AUTO_K) + ([AUTO_K] if AUTO_K in ks else [])


def compatible_drafts(target: Model, files: Sequence[Union[str, Path]],
                      on_skip: Optional[Callable[[str, str], None]] = None) -> list[Candidate]:
    """The GGUF ``files`` that can draft for ``target``, judged by llama.cpp's vocabulary rules; each file
    is opened with a tiny context. ``on_skip(name, reason)`` hears about the others."""
    target_vocab, found = target.vocab_info(), []
    for path in map(Path, files):
        if path.resolve() == Path(target.path).resolve():
            continue
        try:
            with Model(path, LoadOptions(n_ctx=256, n_batch=32)) as m:
                verdict = check(target_vocab, m.vocab_info())
            ok, reason = verdict.ok, verdict.reason
        except BackendError as exc:
            ok, reason = False, str(exc)
        if ok:
            found.append(Candidate.model(path))
        elif on_skip:
            on_skip(path.name, reason)
    return found


def select(candidates: Sequence[Candidate], spec: str) -> list[Candidate]:
    """Pick candidates by 'all' or a comma list of ids / file names ('lookup' is always known)."""
    if not spec or spec.strip() == "all":
        return list(candidates)
    by_key = {}
    for c in candidates:  # a file's name and stem pick its model; "auto" picks the combined drafter
        by_key.update({c.id: c, **({Path(c.path).name: c, Path(c.path).stem: c} if c.path and c.proposer
                                   == ProposerName.DRAFT else {})})
    by_key.setdefault("lookup", LOOKUP)
    by_key.update({"auto": c for c in candidates if c.proposer == ProposerName.AUTO})  # (the first's, the pair's own)
    chosen = []
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        if name not in by_key:
            raise ValueError(f"unknown draft {name!r}; candidates: {', '.join(c.id for c in candidates)}")
        if by_key[name] not in chosen:
            chosen.append(by_key[name])
    return chosen


@dataclass
class TuneConfig:
    candidates: list
    ks: list
    prompts: list
    max_tokens: int = FULL_MAX_TOKENS
    temperature: float = 0.0
    seed: int = 0
    p_mins: tuple = (DEFAULT_P_MIN,)  # swept for K = auto only (a fixed K ignores p_min)
    k_max: int = DEFAULT_K_MAX
    rule: str = Rule.REJECTION
    repeats: int = 1
    warmup: bool = True
    quick: bool = False

    def gen(self, cand: Optional[Candidate] = None, k=None, p_min: Optional[float] = None) -> GenConfig:
        """The GenConfig of one cell (``cand=None``: the plain baseline)."""
        sampler = SamplerSettings(temperature=self.temperature, seed=self.seed)
        if cand is None:
            return GenConfig(max_tokens=self.max_tokens, sampler=sampler, speculative=False)
        return GenConfig(max_tokens=self.max_tokens, sampler=sampler, proposer=cand.proposer, k=k,
                         k_max=self.k_max, p_min=DEFAULT_P_MIN if p_min is None else p_min,
                         rule=self.rule).validate()

    def cells(self) -> list[tuple]:
        """(k, p_min) per cell of one candidate: p_min is None for a fixed K."""
        return [(k, p) for k in self.ks for p in (self.p_mins if k == AUTO_K else (None,))]

    def describe(self) -> dict:
        d = asdict(replace(self, candidates=[], prompts=[]))
        d["candidates"] = [c.id for c in self.candidates]
        d["prompts"] = [{"id": p.id, "category": p.category} for p in self.prompts]
        d["p_mins"] = list(self.p_mins)
        return d

    def runs_per_candidate(self) -> int:
        n_spec = len(self.cells())
        return len(self.prompts) * self.repeats * (n_spec + -(-n_spec // BASELINE_EVERY))

    def total_runs(self) -> int:
        """Measured runs (plain baselines included, warm-ups not) of the whole sweep."""
        return len(self.candidates) * self.runs_per_candidate()


@dataclass
class _Clock:
    total: int
    progress: Optional[Progress]
    done: int = 0
    t0: float = field(default_factory=time.perf_counter)

    def tick(self, what: str) -> None:
        self.done += 1
        if self.progress:
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.done * (self.total - self.done) if self.done else None
            self.progress(self.done, self.total, what, eta)


@dataclass(frozen=True)
class CellPrompt:
    """One prompt's figures in one cell (``to_dict``: an entry of the cell's ``per_prompt``)."""

    id: str
    category: str
    speedup: Optional[float]  # median over its runs of spec tokens/s ÷ the paired baseline
    tps: Optional[float]
    baseline_tps: Optional[float]
    acceptance_rate: float  # this and the rest from its runs pooled
    mean_accepted: float
    alpha: float
    mean_k: float
    c: Optional[float]
    v: Optional[float]
    bound: Optional[float]
    paused: Optional[float]
    limit: Optional[str]
    pooled: Summary = field(default_factory=Summary, repr=False, metadata=PRIVATE)  # its runs, for the cell's pool
    runs: tuple = field(default=(), repr=False, metadata=PRIVATE)  # each run's speedup, in repeat order

    def to_dict(self) -> dict:
        return public_dict(self)


@dataclass(frozen=True)
class Cell:
    """One (draft, K, p_min) of a sweep: medians over prompts; ``to_dict`` is the result's and history's cell."""

    draft: str
    proposer: str
    draft_path: Optional[str]
    k: object
    p_min: Optional[float]
    speedup: Optional[float]
    speedup_min: Optional[float]  # spread: min and max of the per-prompt speedups
    speedup_max: Optional[float]
    acceptance_rate: Optional[float]
    mean_accepted: Optional[float]
    alpha: Optional[float]
    mean_k: Optional[float]
    c: Optional[float]
    v: Optional[float]
    bound: Optional[float]
    tps: Optional[float]
    baseline_tps: Optional[float]
    per_position: list  # pooled over the prompts
    paused: Optional[float]
    limit: Optional[str]
    prompts: int
    complete: bool  # every prompt measured (not cut short by a cancel)
    repeat_min: Optional[float]  # repeat range: the smallest and largest of the per-repeat medians over the
    repeat_max: Optional[float]  # prompts (None with one repeat; ranking.py)
    per_prompt: list  # CellPrompt

    def to_dict(self) -> dict:
        return dict(public_dict(self), per_prompt=[p.to_dict() for p in self.per_prompt])


def _prompt_entry(prompt: Prompt, runs: list[tuple[Summary, float]]) -> CellPrompt:
    """One prompt's figures for one cell from its (spec stats, paired baseline tokens/s) runs."""
    speedups = [st.tokens_per_s / base for st, base in runs if base]
    base = median(b for _, b in runs)
    s = pool([st for st, _ in runs])
    c, v, bound = costs(s, base)
    return CellPrompt(id=prompt.id, category=prompt.category, speedup=median(speedups),
                      tps=median(st.tokens_per_s for st, _ in runs), baseline_tps=base,
                      acceptance_rate=s.acceptance_rate, mean_accepted=s.mean_accepted, alpha=s.alpha,
                      mean_k=s.mean_k, c=c, v=v, bound=bound, paused=s.paused_share, limit=s.limit, pooled=s,
                      runs=tuple(speedups) if len(speedups) == len(runs) else ())


def cell_summary(cand: Candidate, k, p_min, per_prompt: list[CellPrompt], n_prompts: int) -> Cell:
    """A cell: medians over prompts (spread = min/max of the per-prompt speedups), pooled per-position."""
    speedups = [p.speedup for p in per_prompt if p.speedup is not None]
    pooled = pool([p.pooled for p in per_prompt])
    med = lambda key: median(getattr(p, key) for p in per_prompt)  # noqa: E731
    rep_lo, rep_hi = repeat_range([p.runs for p in per_prompt if p.runs])
    return Cell(
        draft=cand.id, proposer=cand.proposer, draft_path=cand.path, k=k, p_min=p_min,
        speedup=med("speedup"), speedup_min=min(speedups) if speedups else None,
        speedup_max=max(speedups) if speedups else None,
        acceptance_rate=med("acceptance_rate"), mean_accepted=med("mean_accepted"), alpha=med("alpha"),
        mean_k=med("mean_k"), c=med("c"), v=med("v"), bound=med("bound"),
        tps=med("tps"), baseline_tps=med("baseline_tps"), per_position=pooled.per_position,
        paused=pooled.paused_share, limit=pooled.limit,
        prompts=len(per_prompt), complete=len(per_prompt) == n_prompts, repeat_min=rep_lo, repeat_max=rep_hi,
        per_prompt=list(per_prompt),
    )


class _DraftSlot:
    """Loads each candidate draft into the pair once; puts the pair's own draft (kept loaded) back at the end."""

    def __init__(self, pair: Pair):
        self.pair = pair
        self.original = pair.draft

    def use(self, cand: Candidate) -> None:
        if cand.proposer not in (ProposerName.DRAFT, ProposerName.AUTO):
            return
        current = self.pair.draft
        if current is not None and Path(current.path).resolve() == Path(cand.path).resolve():
            return
        self._release(self.pair.swap_draft(self._load(cand.path)))

    def _load(self, path: str) -> Model:
        return open_draft(path, draft_options_for(self.pair.target, self.original), self.pair.target)

    def _release(self, model: Optional[Model]) -> None:
        if model is not None and model is not self.original:
            model.close()

    def restore(self) -> None:
        if self.pair.draft is not self.original:
            self._release(self.pair.swap_draft(self.original))


def order_candidates(pair: Pair, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The pair's loaded draft first (no reload), then lookup and MTP, then the others."""
    loaded = str(Path(pair.draft.path).resolve()) if pair.draft is not None else None
    key = lambda c: (0 if c.path and str(Path(c.path).resolve()) == loaded  # noqa: E731
                     else 1 if c.proposer in (ProposerName.LOOKUP, ProposerName.MTP) else 2)
    return sorted(candidates, key=key)


def sweep(pair: Pair, cfg: TuneConfig, progress: Optional[Progress] = None,
          cancel: Optional[threading.Event] = None) -> SweepResult:
    """Run the sweep; returns its SweepResult (partial when cancelled; the cells then hold only what was
    measured). The pair's own draft is restored afterwards."""
    started = time.time()
    prompts, skipped = encode(pair, cfg.prompts)  # a prompt past the context is reported, not run
    cfg = replace(cfg, prompts=[p for p, _ in prompts])
    clock = _Clock(cfg.total_runs(), progress)
    cancelled = lambda: cancel is not None and cancel.is_set()  # noqa: E731
    slot, errors = _DraftSlot(pair), []
    records: dict = {}  # (cand.id, k, p_min) -> {prompt id: [(stats, baseline)]}
    baselines: dict = {p.id: [] for p, _ in prompts}
    candidates = order_candidates(pair, cfg.candidates)
    partial = False
    if progress:
        progress(0, clock.total, "warm-up", None)
    try:
        if cfg.warmup and prompts and not cancelled():
            measure(pair, prompts[0][1], replace(cfg.gen(), max_tokens=min(16, cfg.max_tokens)))
        for cand in candidates:
            if cancelled():
                partial = True
                break
            done_before = clock.done
            try:
                slot.use(cand)
                _measure_candidate(pair, cfg, cand, prompts, records, baselines, clock, cancelled)
            except (IncompatiblePair, BackendError, ValueError) as exc:  # a failed draft is a failed cell
                errors.append({"draft": cand.id, "error": str(exc)})
                for key in [key for key in records if key[0] == cand]:
                    del records[key]
                clock.total -= cfg.runs_per_candidate() - (clock.done - done_before)
    except _Cancelled:
        partial = True
    finally:
        slot.restore()
    by_id = {p.id: p for p, _ in prompts}
    cells = []
    for (cand, k, p_min), per in records.items():
        entries = [_prompt_entry(by_id[pid], runs) for pid, runs in per.items()]
        cells.append(cell_summary(cand, k, p_min, entries, len(prompts)))
    recs = recommend(cells, [p.category for p, _ in prompts])
    best = recs.get("all")
    return SweepResult(
        cells=[cell.to_dict() for cell in cells], best=best, recommendations=recs, partial=partial,
        errors=errors, skipped=skipped,
        baselines=[{"prompt": pid, "tps": tps} for pid, tps in baselines.items()],
        baseline_tps=median(t for tps in baselines.values() for t in tps),
        target=str(pair.target.path.name), config=cfg.describe(),
        runs_done=clock.done, runs_total=clock.total,
        started_at=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        duration_s=round(time.time() - started, 1),
    )


def _measure_candidate(pair: Pair, cfg: TuneConfig, cand: Candidate, prompts: list, records: dict,
                       baselines: dict, clock: _Clock, cancelled: Callable[[], bool]) -> None:
    """Every cell of one (loaded) candidate over the prompts and repeats, with interleaved plain baselines."""
    if cfg.warmup and prompts:
        k0, p0 = cfg.cells()[0]
        measure(pair, prompts[0][1], replace(cfg.gen(cand, k0, p0), max_tokens=min(16, cfg.max_tokens)))
    for rep in range(cfg.repeats):
        for prompt, tokens in prompts:
            cells = cfg.cells() if rep % 2 == 0 else cfg.cells()[::-1]
            base = None
            for i, (k, p_min) in enumerate(cells):
                if i % BASELINE_EVERY == 0:
                    if cancelled():
                        raise _Cancelled
                    base = measure(pair, tokens, cfg.gen()).tps
                    baselines[prompt.id].append(base)
                    clock.tick(f"{prompt.id} plain")
                if cancelled():
                    raise _Cancelled
                run = measure(pair, tokens, cfg.gen(cand, k, p_min))
                records.setdefault((cand, k, p_min), {}).setdefault(prompt.id, []).append((run.stats, base))
                clock.tick(f"{prompt.id} {cand.id} K={k}")


class _Cancelled(Exception):
    pass
