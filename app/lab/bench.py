"""Headless benchmark: plain vs speculative decoding of one pair on this machine.

Method: one warm-up run of each mode, then for every prompt and repeat a plain and a speculative run in
alternating order (plain first on even repeats, speculative first on odd ones), each from a cold KV cache so
no run profits from another's prompt. Tokens/s counts generated tokens over decode time (prompt processing
excluded). Reported figures are medians over prompts of per-prompt medians over repeats; ``speedup`` is the
median of the per-prompt speedups, each taken between runs that were interleaved in time.
"""

from __future__ import annotations

import json
import statistics
import threading
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from app.engine.llama.backend import ContextFullError
from app.engine.events import StepEvent
from app.engine.loop import GenConfig, run
from app.engine.names import DraftKind, ProposerName
from app.engine.pair import Pair
from app.engine.stats import costs, median, pool
from app.engine.summary import Summary
from app.lab.benchguard import GUARD, flagged, unsteady, where
from app.lab.parting import divergence
from app.lab.prompts import Prompt


@dataclass
class RunResult:
    tokens: list[int]
    stats: Summary
    steps: list[StepEvent] = field(default_factory=list)

    @property
    def tps(self) -> float:
        return self.stats.tokens_per_s


def measure(pair: Pair, tokens: Sequence[int], cfg: GenConfig, forget: bool = True) -> RunResult:
    """One generation from a cold cache (the prompt is processed afresh, and not timed); ``forget``: lookup
    remembers nothing of earlier runs either (a benchmark's runs must not find each other's replies)."""
    pair.reset(lookup=forget)
    steps: list[StepEvent] = []
    out, stats = run(pair.target, tokens, cfg, pair.proposer(cfg), length=pair.draft_length(cfg), steps=steps)
    return RunResult(out, stats, steps)


REFERENCES = ("bare", "bare-spec", "llama-cpp-lookup", "local")
BARE_SPEC_K = 8  # the bare speculative loop's draft length when Tandem's is auto (the hand-picked K of the notes)


@dataclass
class BenchConfig:
    gen: GenConfig = field(default_factory=GenConfig)
    repeats: int = 1
    warmup: bool = True
    reference: Optional[str] = None  # also time a reference decoder (see reference.py), interleaved
    local: Optional[Pair] = None  # reference "local": the same pair on this machine alone (the bench's is split)
    guard: float = GUARD  # prompts below this speedup are flagged with where their time went (benchguard.py)


def run_bench(pair: Pair, prompts: Sequence[Prompt], bcfg: BenchConfig,
              progress: Optional[Callable[[int, int, str], None]] = None,
              cancel: Optional[threading.Event] = None) -> BenchResult:
    """Interleaved plain/speculative runs over ``prompts``; ``to_dict()`` of the result is the bench JSON."""
    spec_cfg = bcfg.gen
    plain_cfg = GenConfig(max_tokens=spec_cfg.max_tokens, sampler=spec_cfg.sampler, speculative=False)
    encoded, skipped = encode(pair, prompts)
    if bcfg.warmup:
        warm_tokens = min(32, spec_cfg.max_tokens)
        for cfg in (replace(plain_cfg, max_tokens=warm_tokens), replace(spec_cfg, max_tokens=warm_tokens)):
            measure(pair, encoded[0][1], cfg)
    local = bcfg.reference == "local"  # its "ref" slot runs the local pair twice: plain, then speculative
    if local and bcfg.local is None:
        raise ValueError("the local reference needs the pair loaded on this machine as well (BenchConfig.local)")
    ref_runs = 2 if local else 1 if bcfg.reference else 0
    total, done = len(encoded) * bcfg.repeats * (2 + ref_runs), 0
    per_prompt: list = []
    index_bytes: Optional[int] = None
    shared_from = shares_so_far(pair)
    for prompt, tokens in encoded:
        plain_runs: list[RunResult] = []
        spec_runs: list[RunResult] = []
        ref_tps: list[float] = []
        local_plain: list[float] = []
        for r in range(bcfg.repeats):
            order = ["plain", "spec"] + (["ref"] if bcfg.reference else [])
            order = order if r % 2 == 0 else order[::-1]
            for mode in order:
                if cancel is not None and cancel.is_set():
                    return _aggregate(per_prompt, spec_cfg, True, bcfg.reference, skipped, index_bytes, bcfg.guard)
                if mode == "ref" and local:
                    local_plain.append(measure(bcfg.local, tokens, plain_cfg).tps)
                    ref_tps.append(measure(bcfg.local, tokens, spec_cfg).tps)
                elif mode == "ref":
                    ref_tps.append(_reference(bcfg.reference, pair, tokens, spec_cfg))
                else:
                    result = measure(pair, tokens, spec_cfg if mode == "spec" else plain_cfg)
                    (spec_runs if mode == "spec" else plain_runs).append(result)
                    if mode == "spec" and spec_cfg.proposer == ProposerName.AUTO:
                        index_bytes = max(index_bytes or 0, pair.lookup_index.nbytes())
                done += ref_runs if mode == "ref" else 1
                if progress:
                    progress(done, total, f"{prompt.id} {mode}")
        row = _prompt_result(pair, prompt, tokens, plain_runs, spec_runs, spec_cfg, bcfg.guard)
        if bcfg.reference:
            ref = statistics.median(ref_tps)
            ours = row.baseline_tps if bcfg.reference == "bare" else row.spec_tps
            row = replace(row, reference_tps=ref, reference_ratio=ours / ref if ref else None,
                          reference_speedup=ref / row.baseline_tps if row.baseline_tps else None)
            if local_plain:
                plain = statistics.median(local_plain)
                row = replace(row, reference_plain_tps=plain,
                              reference_plain_ratio=row.baseline_tps / plain if plain else None)
        per_prompt.append(row)
    out = _aggregate(per_prompt, spec_cfg, False, bcfg.reference, skipped, index_bytes, bcfg.guard)
    return replace(out, draft_cache=draft_cache(pair, spec_cfg, shared_from))


def shares_so_far(pair: Pair) -> Optional[tuple[int, int]]:
    """(copies, tokens saved) of the target's cache the draft model has taken so far (kvshare.py), if it can."""
    share = pair.kv_share  # (None without a draft model)
    return (share.pulls, share.saved) if share is not None else None


def draft_cache(pair: Pair, cfg: GenConfig, shared_from: Optional[tuple[int, int]]) -> Optional[str]:
    """How the draft model came by the history in its cache since ``shared_from`` (:func:`shares_so_far`), for
    the report; None where ``cfg``'s proposer does not use a draft model."""
    if pair.draft is None or pair.draft_kind != DraftKind.MODEL \
            or cfg.proposer not in (ProposerName.AUTO, ProposerName.DRAFT, ProposerName.TREE):
        return None
    share = pair.kv_share
    if share is None or shared_from is None:
        return f"the draft model read the history itself ({pair.kv_share_reason or 'not asked to share'})"
    if share.refused:
        return f"the draft model read the history itself: {share.refused}"
    pulls, saved = share.pulls - shared_from[0], share.saved - shared_from[1]
    return (f"the draft model took a copy of the target's KV cache {pulls} times in this run instead of reading "
            f"{saved} history tokens (one network at two precisions)")


def encode(pair: Pair, prompts: Sequence[Prompt]) -> tuple[list[tuple[Prompt, list[int]]], list[dict]]:
    """(prompt, tokens) for every prompt that fits in the context, and the others as ``{"id", "error"}`` so
    the report marks them; ContextFullError when none fits."""
    encoded, skipped = [], []
    for p in prompts:
        try:
            encoded.append((p, p.tokens(pair)))
        except ContextFullError as exc:
            skipped.append({"id": p.id, "category": p.category, "error": str(exc)})
    if not encoded:
        raise ContextFullError(f"no prompt fits in the context: {skipped[0]['error']}")
    return encoded, skipped


def _reference(kind: str, pair: Pair, tokens: list[int], cfg: GenConfig) -> float:
    from app.lab import reference

    max_tokens = cfg.max_tokens
    if kind == "bare-spec":
        if pair.draft is None:
            raise ValueError("the bare-spec reference needs a pair with a draft model")
        k = cfg.k if isinstance(cfg.k, int) else BARE_SPEC_K
        return reference.bare_speculative(pair.target.path, pair.draft.path, tokens, max_tokens, k=k,
                                          n_ctx=pair.target.n_ctx, n_threads=pair.target.n_threads)[0]
    if kind == "bare":
        return reference.bare_greedy(pair.target.path, tokens, max_tokens, n_ctx=pair.target.n_ctx,
                                     n_threads=pair.target.n_threads)[0]
    if kind == "llama-cpp-lookup":
        return reference.llama_cpp_lookup(pair.target.path, tokens, max_tokens, num_pred_tokens=2,
                                          n_ctx=pair.target.n_ctx, n_threads=pair.target.n_threads)[0]
    raise ValueError(f"unknown reference {kind!r}; choose one of {', '.join(REFERENCES)}")


PRIVATE = {"json": False}  # dataclass field metadata: kept on the object, left out of ``to_dict``


def public_dict(obj) -> dict:
    """A result dataclass as its JSON dict: every field not marked ``PRIVATE``, in order, values as they are."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.metadata.get("json", True)}


REFERENCE_KEYS = ("reference_tps", "reference_ratio", "reference_speedup")
LOCAL_KEYS = ("reference_plain_tps", "reference_plain_ratio")


@dataclass(frozen=True)
class PromptRow:
    """One prompt of a benchmark (``to_dict``: an entry of the JSON's ``per_prompt``)."""

    id: str
    category: str
    prompt: str  # the prompt's first 60 characters
    baseline_tps: float  # median over repeats
    spec_tps: float
    speedup: Optional[float]
    acceptance_rate: float  # this and the rest up to ``limit`` from the speculative runs pooled
    mean_accepted: float
    alpha: float
    mean_k: float
    per_position: list
    histogram: list
    c: Optional[float]
    v: Optional[float]
    bound: Optional[float]
    identical: bool
    mismatch: Optional[dict]  # ``divergence`` of the first speculative run that differs (greedy only)
    paused: Optional[float]
    limit: Optional[str]
    tokens: int
    plain_runs: list  # tokens/s of each run
    spec_runs: list
    pooled: Summary = field(default_factory=Summary, repr=False, metadata=PRIVATE)  # the speculative runs'
    lookup_share: Optional[float] = None  # of the accepted draft tokens, the share prompt lookup proposed
    reference_tps: Optional[float] = None  # with a reference decoder only (then all three are in the JSON)
    reference_ratio: Optional[float] = None
    reference_speedup: Optional[float] = None
    reference_plain_tps: Optional[float] = None  # reference "local" only: plain decoding on this machine alone
    reference_plain_ratio: Optional[float] = None  # plain tokens/s split / local
    where: Optional[dict] = None  # below GUARD only: where the speculative runs' time went (benchguard.where)
    unsteady: Optional[str] = None  # why its timings cannot be trusted (benchguard.unsteady), or None

    def to_dict(self) -> dict:
        out = public_dict(self)
        if self.reference_tps is None:
            for key in REFERENCE_KEYS:
                del out[key]
        if self.reference_plain_tps is None:
            for key in LOCAL_KEYS:
                del out[key]
        return out


@dataclass(frozen=True)
class BenchResult:
    """What ``run_bench`` measured; ``to_dict`` is the bench JSON contract (``launcher.py bench --json``)."""

    baseline_tps: Optional[float]  # medians over prompts
    spec_tps: Optional[float]
    speedup: Optional[float]
    acceptance_rate: Optional[float]  # from every prompt's speculative runs pooled
    mean_accepted: Optional[float]
    alpha: Optional[float]
    identical: Optional[bool]  # None at T > 0
    mismatches: list  # {"prompt", "position", "gap", "rounding", "near_tie"} (``parting.divergence``)
    c: Optional[float]
    v: Optional[float]
    bound: Optional[float]
    efficiency: Optional[float]
    paused: Optional[float]
    limit: Optional[str]
    k: object
    mean_k: Optional[float]
    per_position: list
    histogram: list
    proposer: str
    temperature: float
    max_tokens: int
    partial: bool
    reference: Optional[dict]
    per_prompt: list  # PromptRow
    skipped: list = field(default_factory=list)  # prompts past the context: {"id", "category", "error"}
    lookup_share: Optional[float] = None  # of every accepted draft token, the share prompt lookup proposed
    lookup_index_bytes: Optional[int] = None  # proposer auto: the most its lookup index held after a run
    draft_cache: Optional[str] = None  # how the draft model came by the history: its own reading or the target's cache
    slow: list = field(default_factory=list)  # ids of the prompts below GUARD × plain speed (each with its ``where``)
    guard: float = GUARD
    unsteady: list = field(default_factory=list)  # ids of the prompts whose timings were unsteady (each says why)
    tree: Optional[dict] = None  # proposer tree: passes with branches, branch tokens, kept path, branch hits

    def to_dict(self) -> dict:
        return dict(public_dict(self), per_prompt=[p.to_dict() for p in self.per_prompt])


def _prompt_result(pair: Pair, prompt: Prompt, tokens: list[int], plain: list[RunResult],
                   spec: list[RunResult], cfg: GenConfig, guard: float = GUARD) -> PromptRow:
    base = statistics.median(r.tps for r in plain)
    spec_tps = statistics.median(r.tps for r in spec)
    s = pool([r.stats for r in spec])
    c, v, bound = costs(s, base)
    identical = all(r.tokens == plain[0].tokens for r in spec)
    speedup = spec_tps / base if base else None
    mismatch = None
    if cfg.sampler.greedy and not identical:
        first_bad = next(r for r in spec if r.tokens != plain[0].tokens)
        mismatch = divergence(pair, tokens, plain[0].tokens, first_bad.tokens)
    return PromptRow(
        id=prompt.id, category=prompt.category, prompt=prompt.label,
        baseline_tps=base, spec_tps=spec_tps, speedup=speedup,
        acceptance_rate=s.acceptance_rate, mean_accepted=s.mean_accepted, alpha=s.alpha,
        mean_k=s.mean_k, per_position=s.per_position, histogram=s.histogram,
        c=c, v=v, bound=bound, identical=identical, mismatch=mismatch,
        paused=s.paused_share, limit=s.limit,
        lookup_share=s.lookup_share if cfg.proposer != ProposerName.LOOKUP else None,
        tokens=len(plain[0].tokens), plain_runs=[r.tps for r in plain], spec_runs=[r.tps for r in spec],
        pooled=s,
        where=where([e for r in spec for e in r.steps], [r.stats for r in plain]) if flagged(speedup, guard) else None,
        unsteady=unsteady([e for r in spec for e in r.steps], [r.stats for r in plain]),
    )


def _aggregate(per_prompt: list[PromptRow], cfg: GenConfig, partial: bool, reference: Optional[str],
               skipped: list, index_bytes: Optional[int] = None, guard: float = GUARD) -> BenchResult:
    pooled = pool([p.pooled for p in per_prompt]) if per_prompt else None
    speedup, bound = median([p.speedup for p in per_prompt]), median([p.bound for p in per_prompt])
    return BenchResult(
        baseline_tps=median([p.baseline_tps for p in per_prompt]),
        spec_tps=median([p.spec_tps for p in per_prompt]),
        speedup=speedup,
        acceptance_rate=pooled.acceptance_rate if pooled else None,
        mean_accepted=pooled.mean_accepted if pooled else None,
        alpha=pooled.alpha if pooled else None,
        identical=all(p.identical for p in per_prompt) if cfg.sampler.greedy else None,
        mismatches=[{"prompt": p.id, **p.mismatch} for p in per_prompt if p.mismatch],
        c=median([p.c for p in per_prompt]),
        v=median([p.v for p in per_prompt]),
        bound=bound,
        efficiency=speedup / bound if speedup and bound else None,
        paused=pooled.paused_share if pooled else None,
        limit=pooled.limit if pooled else None,
        k=cfg.k,
        mean_k=pooled.mean_k if pooled else None,
        per_position=pooled.per_position if pooled else [],
        histogram=pooled.histogram if pooled else [],
        proposer=cfg.proposer,
        temperature=cfg.sampler.temperature,
        max_tokens=cfg.max_tokens,
        partial=partial,
        reference=None if not reference else {
            "kind": reference,
            "tps": median([p.reference_tps for p in per_prompt]),
            "ratio": median([p.reference_ratio for p in per_prompt]),
            "speedup": median([p.reference_speedup for p in per_prompt]),  # reference / Tandem plain
            "compares": "plain tokens/s" if reference == "bare" else "speculative tokens/s",
            **({"plain_tps": median([p.reference_plain_tps for p in per_prompt]),
                "plain_ratio": median([p.reference_plain_ratio for p in per_prompt])} if reference == "local" else {}),
        },
        per_prompt=list(per_prompt),
        skipped=skipped,
        lookup_share=pooled.lookup_share if pooled and cfg.proposer != ProposerName.LOOKUP else None,
        lookup_index_bytes=index_bytes,
        slow=[p.id for p in per_prompt if p.where is not None], guard=guard,
        unsteady=[p.id for p in per_prompt if p.unsteady],
        tree=tree_figures(pooled) if pooled and cfg.proposer == ProposerName.TREE else None,
    )


def tree_figures(s: Summary) -> dict:
    """A tree bench's figures: target passes that verified branches, the branch tokens they held, the draft tokens
    such a pass kept on average (the accepted path), the passes that kept a branch, and tokens per target pass."""
    return {"passes": s.tree_steps, "branch_tokens": s.tree_tokens, "path": s.mean_path,
            "branch_hits": s.branch_hits, "tokens_per_pass": s.mean_accepted}
