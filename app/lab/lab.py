"""The Pair lab session, shared by ``launcher.py tune`` and the Benchmark tab: plan a sweep from a request,
run it with a history entry, write the artifacts (CSV, plots, report) and store the tuned settings."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from app import paths
from app.engine import limits
from app.lab import tune
from app.lab.prompts import CATEGORIES, load_prompts, require_fim
from app.lab.history import History, artifacts_root
from app.engine.loop import DEFAULT_P_MIN
from app.engine.names import ProposerName
from app.engine.pair import Pair
from app.lab.report import write_artifacts
from app.engine.llama.vocab import check
from app.models import library, meta, standin
from app.models.compat import kind_refusal
from app.models.ggufheader import GGUFError
from app.lab.tuned import machine_info, save_tuned, settings_from_recommendation
from app.lab.result import SweepResult

COMPAT_CACHE = "compat.json"


@dataclass
class LabRequest:
    drafts: str = "all"  # "all" or a comma list of draft ids / file names / "lookup"
    ks: Optional[str] = None  # "1,2,4,8", "1-12", "auto"…; None: the quick or full default
    suite: str = "all"
    prompts_file: Optional[str] = None
    max_tokens: Optional[int] = None  # None: the quick or full default
    temperature: float = 0.0
    quick: bool = False
    repeats: int = 1
    p_mins: tuple = (DEFAULT_P_MIN,)
    seed: int = 0


def _file_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}"


def installed_files(pair: Pair) -> list[Path]:
    """Installed GGUF files: the model library's list (catalog, downloaded, imported, derived) when it is
    available, plus every ``*.gguf`` under the models directory and beside the target."""
    found: list[Path] = [Path(rec["path"]) for rec in library.installed(with_meta=False)]
    for folder in dict.fromkeys([paths.models_dir().resolve(), Path(pair.target.path).resolve().parent]):
        found += [p for p in sorted(folder.rglob("*.gguf")) if ".part" not in p.name]
    target = Path(pair.target.path).resolve()
    unique = {str(p.resolve()): p for p in found if p.is_file() and p.resolve() != target}
    return list(unique.values())


def _verdict(pair: Pair, target_vocab, path: Path) -> tuple[bool, str]:
    """llama.cpp's compatibility rule from the GGUF header (no weights loaded), else by opening the model."""
    try:
        draft, vocab = meta.read(path)
        verdict = check(target_vocab, vocab)
        # a head made for another target, or an assistant drafter for another architecture, is no candidate
        why = kind_refusal(meta.read(pair.target.path)[0], draft) if verdict.ok else None
        return (False, why) if why else (bool(verdict.ok), verdict.reason)
    except GGUFError as exc:  # a truncated or corrupt file: llama.cpp could not load it either
        return False, str(exc)
    except Exception:
        skipped: list = []
        ok = bool(tune.compatible_drafts(pair.target, [path], lambda n, r: skipped.append(r)))
        return ok, skipped[0] if skipped else ""


def discover(pair: Pair, on_skip: Optional[Callable[[str, str], None]] = None) -> list[tune.Candidate]:
    """Every installed model that can draft for the pair's target, as candidates; verdicts are cached per
    (target, file) in ``TANDEM_HOME/pairlab/compat.json``."""
    cache_path = artifacts_root() / COMPAT_CACHE
    cache = paths.read_json(cache_path)  # a cut file is moved aside with a warning, never silently dropped
    verdicts = cache.get(_file_key(Path(pair.target.path)))
    if not isinstance(verdicts, dict):
        verdicts = cache[_file_key(Path(pair.target.path))] = {}
    found, changed, target_vocab = [], False, None
    for path in installed_files(pair):
        key = _file_key(path)
        if not (isinstance(verdicts.get(key), list) and len(verdicts[key]) == 2):
            target_vocab = target_vocab or pair.target.vocab_info()
            verdicts[key], changed = list(_verdict(pair, target_vocab, path)), True
        ok, reason = verdicts[key]
        if ok:
            found.append(tune.Candidate.model(path))
        elif on_skip:
            on_skip(path.name, reason)
    if changed:
        with paths.store_lock(cache_path):  # merged into what another process may have written meanwhile
            fresh = paths.read_json(cache_path)
            slot = fresh.get(_file_key(Path(pair.target.path)))
            if not isinstance(slot, dict):
                slot = fresh[_file_key(Path(pair.target.path))] = {}
            slot.update(verdicts)
            paths.write_json(cache_path, fresh, indent=1)
    return found


def plan(pair: Pair, req: LabRequest, on_skip: Optional[Callable[[str, str], None]] = None) -> tune.TuneConfig:
    """Turn a request into a sweep configuration (raises ValueError / PromptFileError on bad input).

    ``--quick`` (without explicit choices): the pair's own draft and prompt lookup (and the target's MTP head
    where it has one), K in 2, 4, 8, two prompts of 32 tokens. The full sweep: every installed compatible
    draft, prompt lookup and the MTP head, K in 1–4, 6, 8, auto,
    the whole suite at 128 tokens."""
    limits.check_settings({"max_tokens": req.max_tokens, "temperature": req.temperature, "repeats": req.repeats,
                           "seed": req.seed})
    for p_min in req.p_mins:
        limits.check("p_min", p_min)
    prompts = load_prompts(req.prompts_file, req.suite)
    require_fim(pair, prompts)  # the completion suite on a target without FIM tokens: refused before any run
    if req.quick and not req.prompts_file:
        if req.suite == "all":
            prompts = [p for p in prompts if p.id in tune.QUICK_PROMPTS] or prompts[:2]
        else:
            prompts = prompts[:2]
    ks = tune.parse_ks(req.ks) if req.ks else list(tune.QUICK_KS if req.quick else tune.FULL_KS)
    own = [tune.Candidate.model(pair.draft.path)] if pair.draft is not None else []
    names = {s.strip() for s in (req.drafts or "all").split(",") if s.strip()}
    free = [tune.LOOKUP] + ([tune.MTP] if pair.has_mtp else [])  # no model to load: prompt lookup, MTP head
    both = [tune.Candidate.combined(pair.draft.path)] if pair.draft is not None else []  # ranked beside them
    own_names = {ProposerName.LOOKUP, ProposerName.MTP, ProposerName.AUTO} | {c.id for c in own} \
        | {Path(c.path).name for c in own} | {Path(c.path).stem for c in own}
    if (req.quick and names <= {"all"}) or (names and names <= own_names):
        pool = own + free + both  # no need to open every installed model
    else:
        found = discover(pair, on_skip)
        known = {str(Path(c.path).resolve()) for c in found}
        pool = found + [c for c in own if str(Path(c.path).resolve()) not in known] + free + both
    candidates = tune.select(pool, req.drafts or "all")
    if not candidates:
        raise ValueError("no candidate drafts")
    max_tokens = req.max_tokens or (tune.QUICK_MAX_TOKENS if req.quick else tune.FULL_MAX_TOKENS)
    return tune.TuneConfig(candidates=candidates, ks=ks, prompts=prompts, max_tokens=max_tokens,
                           temperature=req.temperature, seed=req.seed, p_mins=tuple(req.p_mins),
                           repeats=max(req.repeats, tune.QUICK_REPEATS) if req.quick else req.repeats, quick=req.quick)


def run_lab(pair: Pair, cfg: tune.TuneConfig, pair_id: Optional[str],
            progress: Optional[tune.Progress] = None, cancel: Optional[threading.Event] = None,
            history: Optional[History] = None, command: Optional[str] = None,
            store_tuned: bool = True) -> SweepResult:
    """Sweep with a history entry (running → complete | partial | failed, failed too when no draft could be
    measured), artifacts in ``TANDEM_HOME/pairlab/run-NNNN/``, and, for a complete run, the tuned settings
    for this machine."""
    machine = machine_info()
    hist = history or History()
    run_id = hist.start(pair_id, Path(pair.target.path).name, cfg.describe(), machine)
    try:
        result = tune.sweep(pair, cfg, progress=progress, cancel=cancel)
        result.stamp(pair=pair_id, run_id=run_id, machine=machine, command=command)
        folder = artifacts_root() / f"run-{run_id:04d}"
        facts = {"id": run_id, "pair_id": pair_id, "machine": machine, "standin": standin.caption(pair.target.path)}
        result.stamp(files=write_artifacts(result.to_dict(), folder, meta=facts))
        # a sweep in which nothing could be measured is a failure, never a complete run
        result.stamp(status=("partial" if result.partial else "complete") if result.cells else "failed")
        (folder / "result.json").write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
        hist.finish(run_id, result.to_dict(), status=result.status, artifacts=folder)
    except BaseException as exc:
        hist.fail(run_id, f"{type(exc).__name__}: {exc}")
        raise
    saved = None
    if store_tuned and pair_id and not result.partial and result.best:
        saved = save_tuned(pair_id, tuned_settings(result))
    return result.stamp(tuned=saved)


def tuned_settings(result: SweepResult, category: str = "all") -> dict:
    """The settings a recommendation stands for, with every category's choice under ``by_category``."""
    recs = result.recommendations or {}
    rec = recs.get(category) or result.best
    settings = settings_from_recommendation(rec, result.run_id)
    settings["by_category"] = {cat: settings_from_recommendation(r, result.run_id)
                               for cat, r in recs.items() if cat in CATEGORIES}
    return settings
