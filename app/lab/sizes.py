"""Pair lab: how big must the target be? The same draft against stand-in targets of growing size.

A stand-in (``models/standin.py``) writes its source's exact text at the cost of a model ``factor``² times its
layer weights, so the draft's acceptance stays the same at every size and only the target's cost grows: the
sweep measures where, on this machine, a target step becomes dear enough next to a draft token for drafting to
pay. x1 is the source itself.

Method: for each size (smallest first), the stand-in is derived if it is missing — after checking the disk and
the memory it needs, so a size that cannot run here is skipped with the figures, never written for nothing —
then the pair (that target, the same draft) is loaded alone and benchmarked as ``bench`` does (``run_bench``:
plain and speculative runs interleaved, each from a cold cache, medians over prompts), with a fixed K and the
draft model alone (prompt lookup costs nothing at any size and would hide the draft's cost; ``auto`` K would
decode plainly where drafting loses and hide where it starts to pay). Per size: plain tokens/s, the draft's
cost c (a draft token's time over a plain target step), acceptance, the measured speedup and the Leviathan
bound from the same runs. ``sizereport.py`` turns them into the recommendation, the plots and the history run.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from app import paths
from app.engine.errors import BadInput
from app.engine.llama.backend import BackendError
from app.engine.loop import GenConfig
from app.engine.names import ProposerName
from app.engine.decoding.sampling import SamplerSettings
from app.engine.pair import Pair
from app.lab.bench import BenchConfig, BenchResult, encode, measure, run_bench
from app.lab.prompts import Prompt
from app.lab.tune import QUICK_PROMPTS
from app.models import fileops, fit, meta, standin, widen
from app.models.advice import shape_from_meta
from app.models.catalog import Catalog, load as load_catalog
from app.models.fit import GIB, Machine

DEFAULT_FACTORS = (1, 2, 4)  # x8 on request: F32 it is 28 GB; on a CPU a minute a prompt
DEFAULT_K = 4
DEFAULT_MAX_TOKENS = 32
DEFAULT_PROMPTS = 2
CTX = 1024  # the sweep's prompts are short: the memory each size needs is counted at this context
MAX_SIZES = 8
AUTO = "auto"  # the source's type where it fits in memory, else F16 where that fits
TYPES = ("F32", "F16")  # written directly (a quantized stand-in takes an F16 one and a quantize: minutes more)
FTYPE_CHOICES = (AUTO, *TYPES)
DISK_MARGIN = GIB  # kept free beside what the sweep writes
WARM_TOKENS = 4

Load = Callable[[Path, Path], Pair]  # (target, draft) -> the loaded pair (the front end chooses GPU layers)
Progress = Callable[[float, str], None]  # (fraction 0..1, what)


class SizeError(BadInput, ValueError):
    hint = "sizes are stand-in factors: 1 (the source itself) and whole numbers from 2 to 64, e.g. 1,2,4,8"


def parse_factors(text: str) -> tuple[int, ...]:
    """'1,2,4,8' -> (1, 2, 4, 8): sorted, unique; 1 is the source itself."""
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    if not words:
        raise SizeError("give at least one size, e.g. 1,2,4")
    if len(words) > MAX_SIZES:
        raise SizeError(f"{len(words)} sizes given; at most {MAX_SIZES} in one sweep")
    out = set()
    for word in words:
        digits = word.lower().removeprefix("x")  # "x4" as the sizes are named
        if not (digits.isascii() and digits.isdigit()) or not (int(digits) == 1 or int(digits) in standin.FACTORS):
            raise SizeError(f"{word!r} is not a size: sizes are 1 (the source) or whole numbers from "
                            f"{standin.FACTORS[0]} to {standin.FACTORS[-1]}")
        out.add(int(digits))
    return tuple(sorted(out))


@dataclass(frozen=True)
class SizePlan:
    """One size of the sweep, before anything is written: what it is, what it needs, whether it runs here."""

    factor: int
    ftype: str
    params: int
    file_bytes: int
    memory_bytes: int  # target and draft at the sweep's context
    file: str  # the target file (present or to be derived); not "path", which JSON clients take for an upload
    present: bool
    derive_bytes: int = 0  # the most disk deriving it takes (0: present, or the source itself)
    catalog_model: Optional[str] = None  # the catalog entry that provisions this file, where one does
    skip: Optional[str] = None  # why it is not measured (said in full)
    note: str = ""  # e.g. why F16 rather than F32

    @property
    def label(self) -> str:
        return f"x{self.factor} {self.ftype} ({standin.params_label(self.params)})"

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), label=self.label)

    def line(self) -> str:
        """'x4 F32 (1.8B): 7.25 GB on disk (present), about 6.9 GiB of memory' and what is done about it."""
        where = "the source" if self.factor == 1 else "present" if self.present else \
            f"to derive: {self.derive_bytes / 1e9:.2f} GB written"
        text = (f"{self.label}: {self.file_bytes / 1e9:.2f} GB on disk ({where}), about "
                f"{self.memory_bytes / GIB:.1f} GiB of memory with the draft")
        return text + (f"; {self.note}" if self.note else "") + (f" — skipped: {self.skip}" if self.skip else "")


def standin_file(source: Path, factor: int, ftype: str) -> Path:
    """Where a stand-in of ``source`` lives: '<model>.standin-x<f>.<type>.gguf' beside the models, the catalog's
    names (SmolLM2-135M-Instruct.F32.gguf -> SmolLM2-135M-Instruct.standin-x2.F32.gguf)."""
    stem = source.name.removesuffix(".gguf")
    base, dot, tail = stem.rpartition(".")
    if dot and base and tail.upper() == tail and any(ch.isdigit() for ch in tail):  # F32, Q4_K_M, BF16 ...
        stem = base
    return paths.models_dir() / f"{stem}.standin-x{factor}.{ftype}.gguf"


def _catalog_entry(cat: Catalog, source: Path, factor: int, ftype: str, dest: Path) -> Optional[str]:
    """The catalog stand-in that is this file (same source, factor, type and file name), if there is one."""
    sources = {m.id for m in cat.models.values() if m.file == source.name}
    for entry in cat.models.values():
        if entry.widen == factor and entry.derive_from in sources and (entry.ftype or "F32") == ftype \
                and entry.file == dest.name:
            return entry.id
    return None


def _memory(shape: fit.ModelShape, ctx: int) -> int:
    return fit.parts(shape, ctx).total


def available(machine: Machine) -> tuple[int, str]:
    """Memory a model could use: available RAM plus usable GPU memory where it is the GPU's own."""
    gpu = 0 if machine.unified else fit.gpu_budget(machine)
    return machine.ram_available + gpu, ("RAM and GPU memory" if gpu else "RAM")


def plan(source: Path, draft: Path, factors: Sequence[int], machine: Machine, disk_free: Optional[int] = None,
         ftype: str = AUTO, ctx: int = CTX, cat: Optional[Catalog] = None) -> list[SizePlan]:
    """Every size with its figures and, where it cannot run here, the reason: memory at ``ctx`` against
    ``machine``, disk for what is still to be derived against ``disk_free`` (counted over the sizes in order).
    ``ftype`` auto: the source's type (F32 or F16) where it fits, else F16. Reads headers only; StandinError
    where the source cannot be widened at all."""
    if ftype not in FTYPE_CHOICES:
        raise SizeError(f"the type is one of {', '.join(FTYPE_CHOICES)}, not {ftype!r}")
    source, draft = Path(source), Path(draft)
    cat = cat or load_catalog()
    src_meta, _ = meta.read(source)
    draft_memory = _memory(shape_from_meta(draft.name, meta.read(draft)[0]), ctx)
    have, where = available(machine)
    free = shutil.disk_usage(paths.models_dir()).free if disk_free is None else disk_free
    own = src_meta.quant.upper() if src_meta.quant.upper() in TYPES else "F16"
    plans = []
    for factor in factors:
        if factor == 1:
            memory = _memory(shape_from_meta(source.name, src_meta), ctx) + draft_memory
            plans.append(SizePlan(1, src_meta.quant.upper() or "?", src_meta.params, source.stat().st_size, memory,
                                  str(source), True, skip=None if memory <= have else _too_big(memory, have, where)))
            continue
        options = []
        for t in dict.fromkeys([own, "F16"] if ftype == AUTO else [ftype]):
            est = standin.estimate(source, factor, t)
            options.append((t, est, _memory(est.shape(), ctx) + draft_memory))
        fitting = [o for o in options if o[2] <= have]
        t, est, memory = fitting[0] if fitting else options[-1]
        skip = None if fitting else _too_big(memory, have, where, t if len(options) > 1 else "")
        note = f"{t}: at {options[0][0]} it would need {options[0][2] / GIB:.1f} GiB" \
            if fitting and fitting[0] is not options[0] else ""
        dest = standin_file(source, factor, t)
        present = fileops.is_done(dest)
        if skip is None and not present:
            if est.disk_bytes + DISK_MARGIN > free:
                skip = (f"deriving it writes {est.disk_bytes / 1e9:.2f} GB and {free / 1e9:.2f} GB is free "
                        f"(keeping {DISK_MARGIN // GIB} GiB spare)")
            else:
                free -= est.disk_bytes
        plans.append(SizePlan(factor, t, est.params, est.file_bytes, memory, str(dest), present,
                              0 if present else est.disk_bytes, _catalog_entry(cat, source, factor, t, dest), skip,
                              note))
    return plans


def _too_big(need: int, have: int, where: str, ftype: str = "") -> str:
    at = f" even at {ftype}" if ftype else ""
    return f"needs about {need / GIB:.1f} GiB of memory{at} and {have / GIB:.1f} GiB of {where} is available here"


@dataclass
class SizeConfig:
    factors: tuple = DEFAULT_FACTORS
    ftype: str = AUTO
    k: int = DEFAULT_K
    max_tokens: int = DEFAULT_MAX_TOKENS
    repeats: int = 1
    ctx: int = CTX
    prompts: list = field(default_factory=list)  # Prompt

    def gen(self) -> GenConfig:
        return GenConfig(max_tokens=self.max_tokens, k=self.k, proposer=ProposerName.DRAFT,
                         sampler=SamplerSettings(temperature=0.0)).validate()

    def describe(self) -> dict:
        return {"kind": "sizes", "factors": list(self.factors), "ftype": self.ftype, "k": self.k,
                "max_tokens": self.max_tokens, "repeats": self.repeats, "ctx": self.ctx, "proposer": "draft",
                "prompts": [{"id": p.id, "category": p.category} for p in self.prompts]}


def pick_prompts(prompts: Sequence[Prompt], n: int) -> list[Prompt]:
    """The first ``n`` prompts (0: all), the Pair lab's quick ones first."""
    ordered = sorted(prompts, key=lambda p: (p.id not in QUICK_PROMPTS, QUICK_PROMPTS.index(p.id)
                                             if p.id in QUICK_PROMPTS else 0))
    return list(ordered[:n] if n else ordered)


@dataclass(frozen=True)
class SizeRow:
    """One measured size: the bench figures of its pair."""

    factor: int
    ftype: str
    label: str
    params: int
    file_bytes: int
    baseline_tps: Optional[float]
    spec_tps: Optional[float]
    speedup: Optional[float]
    speedup_min: Optional[float]
    speedup_max: Optional[float]
    acceptance_rate: Optional[float]
    mean_accepted: Optional[float]
    alpha: Optional[float]
    mean_k: Optional[float]
    c: Optional[float]
    v: Optional[float]
    bound: Optional[float]
    efficiency: Optional[float]
    identical: Optional[bool]
    mismatches: list
    prompts: int
    complete: bool
    draft_cache: Optional[str] = None  # x1 of a one-network pair: the draft takes the target's cache; stand-ins cannot

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_bench(cls, p: SizePlan, r: BenchResult) -> "SizeRow":
        speedups = [x.speedup for x in r.per_prompt if x.speedup is not None]
        return cls(p.factor, p.ftype, p.label, p.params, p.file_bytes, r.baseline_tps, r.spec_tps, r.speedup,
                   min(speedups) if speedups else None, max(speedups) if speedups else None, r.acceptance_rate,
                   r.mean_accepted, r.alpha, r.mean_k, r.c, r.v, r.bound, r.efficiency, r.identical,
                   list(r.mismatches), len(r.per_prompt), not r.partial, r.draft_cache)


@dataclass
class SizeSweep:
    rows: list = field(default_factory=list)  # SizeRow
    skipped: list = field(default_factory=list)  # {"size", "reason"}
    partial: bool = False


def ensure_file(p: SizePlan, source: Path, cat: Optional[Catalog], progress: Optional[Callable[[int, int], None]],
                cancel: Optional[threading.Event]) -> Path:
    """The size's target file, derived now when missing (through its catalog entry where it has one)."""
    if p.factor == 1 or p.present:
        return Path(p.file)
    if p.catalog_model:
        from app.models.provision import ensure_model

        return ensure_model(cat or load_catalog(), p.catalog_model, progress, cancel)
    return standin.derive(source, p.factor, Path(p.file), p.ftype, progress=progress, cancel=cancel)


def sweep(source: Path, draft: Path, plans: Sequence[SizePlan], cfg: SizeConfig, load: Load,
          progress: Optional[Progress] = None, cancel: Optional[threading.Event] = None) -> SizeSweep:
    """Measure every size that can run here, smallest first; a cancel keeps what was measured (partial)."""
    out = SizeSweep(skipped=[{"size": p.label, "reason": p.skip} for p in plans if p.skip])
    todo = [p for p in plans if not p.skip]
    say = progress or (lambda f, what: None)
    cat = load_catalog()
    for i, p in enumerate(todo):
        def part(share: float, what: str, i: int = i) -> None:
            say((i + min(max(share, 0.0), 1.0)) / len(todo), f"{p.label}: {what}")

        if cancel is not None and cancel.is_set():
            out.partial = True
            break
        derive_share = 0.0 if p.present or p.factor == 1 else 0.3
        try:
            target = ensure_file(p, source, cat, lambda done, total: part(derive_share * done / max(total, 1),
                                                                         "deriving the stand-in"), cancel)
        except standin.StandinError as exc:  # e.g. the catalog's own memory check at its larger context
            out.skipped.append({"size": p.label, "reason": str(exc)})
            continue
        except widen.Cancelled:
            out.partial = True
            break
        if cancel is not None and cancel.is_set():
            out.partial = True
            break
        part(derive_share, "loading")
        try:
            pair = load(target, draft)
        except BackendError as exc:  # llama.cpp could not load it here after all (memory taken meanwhile…)
            out.skipped.append({"size": p.label, "reason": f"could not be loaded: {exc}"})
            continue
        with pair:
            result = _bench(pair, cfg, lambda done, total, what: part(
                derive_share + (1 - derive_share) * done / max(total, 1), what), cancel)
        if result.per_prompt:
            out.rows.append(SizeRow.from_bench(p, result))
        if result.partial:
            out.partial = True
            break
    say(1.0, "done")
    return out


def _bench(pair: Pair, cfg: SizeConfig, progress: Callable[[int, int, str], None],
           cancel: Optional[threading.Event]) -> BenchResult:
    gen = cfg.gen()
    encoded, _ = encode(pair, cfg.prompts)
    for mode in (replace(gen, speculative=False, max_tokens=WARM_TOKENS), replace(gen, max_tokens=WARM_TOKENS)):
        measure(pair, encoded[0][1], mode)  # a short warm-up of each mode (the bench's own is 32 tokens)
    return run_bench(pair, cfg.prompts, BenchConfig(gen=gen, repeats=cfg.repeats, warmup=False), progress, cancel)
