"""The app's size sweep (Pair lab: "how big must the target be?"): which files it sweeps for the loaded pair,
what each size needs here, and the sweep itself under the generation lock (nothing else runs beside it, so the
timings are the pair's own). The sweep loads its own pairs, one size at a time; the app's pair stays loaded."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from app import paths
from app.errors import BadInput
from app.lab import sizereport
from app.lab.prompts import load_prompts
from app.lab.sizes import CTX, DEFAULT_FACTORS, DEFAULT_K, DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, SizeConfig, \
    SizePlan, pick_prompts, plan
from app.models import hardware, standin
from app.models.catalog import load as load_catalog
from app.service.loading import PairOptions, load_pair
from app.service.state import AppState, Progress

LOCK_WAIT_S = 1.0


class SizeSweepRefused(BadInput):
    hint = "load a pair with a draft model in Pair settings, then run the size sweep"


def files(state: AppState) -> tuple[Path, Path]:
    """(source target, draft) of the loaded pair: its target, or for a catalog stand-in pair the model it was
    derived from (x1 is the source itself). Refused without a draft model, or for a stand-in of unknown source."""
    if state.pair is None or state.target_path is None:
        raise SizeSweepRefused("no pair is loaded: load one in Pair settings first")
    if state.draft_path is None:
        raise SizeSweepRefused("the loaded pair has no draft model: the size sweep measures a draft model's cost "
                               "against targets of growing size")
    cat = load_catalog()
    pair = cat.pairs.get(state.pair_id or "")
    entry = cat.models.get(pair.target) if pair else None
    if entry is not None and entry.widen and entry.derive_from in cat.models:
        return paths.models_dir() / cat.models[entry.derive_from].file, Path(state.draft_path)
    if standin.info(state.target_path) is not None:
        raise SizeSweepRefused("the loaded target is itself a stand-in whose source is not in the catalog: load "
                               "the pair of its source model and sweep from there")
    return Path(state.target_path), Path(state.draft_path)


def config(factors: tuple = DEFAULT_FACTORS, ftype: str = "auto", k: int = DEFAULT_K,
           max_tokens: int = DEFAULT_MAX_TOKENS, prompts: int = DEFAULT_PROMPTS) -> SizeConfig:
    """The sweep's settings with the built-in prompts (the Pair lab's quick ones first)."""
    return SizeConfig(factors=tuple(factors), ftype=ftype, k=int(k), max_tokens=int(max_tokens), ctx=CTX,
                      prompts=pick_prompts(load_prompts(None, "all"), int(prompts)))


def plans(state: AppState, cfg: SizeConfig) -> list[SizePlan]:
    source, draft = files(state)
    return plan(source, draft, cfg.factors, hardware.detect(), ftype=cfg.ftype, ctx=cfg.ctx)


def run(state: AppState, cfg: SizeConfig, progress: Optional[Progress] = None,
        cancel: Optional[threading.Event] = None, command: Optional[str] = None) -> dict:
    """Plan and run the sweep under the generation lock; the result's JSON dict (``sizereport.run_sizes``)."""
    source, draft = files(state)
    if not state.generation_lock.acquire(timeout=LOCK_WAIT_S):
        raise SizeSweepRefused("a generation is running; try again when it has finished")
    try:
        todo = plan(source, draft, cfg.factors, hardware.detect(), ftype=cfg.ftype, ctx=cfg.ctx)

        def load(target: Path, draft_file: Path):
            return load_pair(PairOptions(target, draft_file, state.gpu_layers, cfg.ctx,
                                         state.pair.target.n_threads if state.pair else 0))[0]

        return sizereport.run_sizes(source, draft, todo, cfg, load, pair_id=state.pair_id, progress=progress,
                                    cancel=cancel, command=command)
    finally:
        state.generation_lock.release()
