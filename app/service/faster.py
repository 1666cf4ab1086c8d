""""Make it faster": detect the hardware, make sure an installed pair that fits is loaded (with a draft if one
is installed for the target), run the Pair lab's quick sweep, and hand back the best settings for the open
Chat with a paragraph saying what was done. The quick sweep does not change the saved defaults."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Optional

from app import paths
from app.lab import eta
from app.lab.history import History
from app.lab.lab import LabRequest, plan, run_lab, tuned_settings
from app.lab.report import recommendation_line
from app.engine.names import ProposerName
from app.models import advice, hardware
from app.models.catalog import load
from app.models.fit import FITS, GIB
from app.service.baseline import warm_up
from app.service.settings import proposer_words
from app.service.state import Activity, AppState

APPLIED = ("speculative", "proposer", "k", "p_min")
Say = Callable[[float, str], None]


def machine_line(machine) -> str:
    gpus = ", ".join(f"{g.description or g.name} ({g.free / GIB:.1f} GiB free)" for g in machine.gpus) or "no GPU"
    return (f"{machine.cpu_cores} CPU cores, {machine.ram_available / GIB:.1f} GiB RAM available, {gpus}")


def _fitting(machine) -> list[dict]:
    """Installed catalog pairs that run here (not known to be incompatible), best first per advice."""
    rows = [r for r in advice.label_pairs(machine=machine)
            if r["installed"] and r["fit"] in FITS[:3] and r.get("compatible") is not False]
    best = advice.recommend(rows, uses=("chat",)).get("chat")
    return sorted(rows, key=lambda r: r["pair"] != best)


def _files(pair_id: str) -> tuple[Path, Path]:
    cat = load()
    entry = cat.pairs[pair_id]
    return (paths.models_dir() / cat.models[entry.target].file, paths.models_dir() / cat.models[entry.draft].file)


def ensure_pair(state: AppState, machine, say: Say) -> str:
    """Load a fitting installed pair if none is loaded, or a draft for a target that has none."""
    if state.pair is not None and state.pair.draft is not None:
        return f"Kept the loaded pair ({Path(state.target_path or '').name} ← {Path(state.draft_path or '').name})."
    rows = _fitting(machine)
    if state.pair is not None:  # a target without a draft: find an installed catalog draft for it
        loaded = Path(state.target_path or "").name
        rows = [r for r in rows if _files(r["pair"])[0].name == loaded]
        if not rows:
            return "No installed draft model matches the loaded target, so only prompt lookup can speculate."
    if not rows:
        raise RuntimeError("no installed pair fits this machine; get one in the Models tab first")
    row = rows[0]
    target, draft = _files(row["pair"])
    say(0.05, f"loading {row['pair']}")
    state.load(target, draft, state.target_options, state.draft_options, pair_id=row["pair"])
    warm_up(state)
    return f"Loaded {row['pair']} ({row['label']} here)."


def use_draft(state: AppState, settings: dict) -> str:
    """Load the draft a recommendation names when another one is loaded; a sentence (or "") for the user."""
    loaded = state.pair.draft.path if state.pair is not None and state.pair.draft is not None else None
    wanted = settings.get("draft") if settings.get("proposer") in (ProposerName.DRAFT, ProposerName.AUTO) else None
    if not wanted or state.pair is None or (loaded and Path(wanted).resolve() == Path(loaded).resolve()):
        return ""
    try:
        state.load(state.target_path, wanted, state.target_options, state.draft_options, pair_id=state.pair_id)
        return f" Loaded draft {Path(wanted).name}."
    except Exception as exc:  # the old pair stays loaded
        return f" Could not load that draft ({exc}); the current one stays."


SWEEP = "Make it faster's quick sweep"


def sweep_estimate(state: AppState, runs: int, tokens: int) -> Optional[tuple[float, str]]:
    """(seconds, what it rests on) for a quick sweep of the loaded pair: from its last quick sweep here, else
    its plain speed measured here, else None (``app.lab.eta``, as the Benchmark tab estimates)."""
    run = History().latest(state.pair_id, ("quick",)) if state.pair_id else None
    return eta.estimate(runs, tokens, run.get("result") if run else None, state.baseline_tps())


def faster_plan(state: AppState) -> str:
    """What "Make it faster" will do and roughly how long it takes, said before it starts."""
    if state.pair is None:
        return ("Make it faster will load an installed pair that fits this machine, then run a quick sweep of "
                "drafters and K on it; how long is known once a pair is loaded.")
    pair_words = (f"keep the loaded pair ({Path(state.target_path or '').name} ← "
                  f"{Path(state.draft_path or '').name})" if state.pair.draft is not None else
                  "look for an installed draft model for the loaded target")
    cfg = plan(state.pair, LabRequest(quick=True))
    runs = cfg.total_runs()
    what = (f"Make it faster will detect this machine, {pair_words}, and run a quick sweep: {runs} runs "
            f"({len(cfg.candidates)} drafters × K in {', '.join(str(k) for k in cfg.ks)}, with plain baselines; "
            f"{len(cfg.prompts)} prompts{f' × {cfg.repeats} repeats' * (cfg.repeats > 1)} of {cfg.max_tokens} "
            "tokens). It then sets this Chat's proposer and K "
            "(not the saved defaults). Chat replies wait until it ends; Stop ends it early.")
    return what + f" How long: {eta.words(sweep_estimate(state, runs, cfg.max_tokens))}."


def make_faster(state: AppState, say: Optional[Say] = None, cancel: Optional[threading.Event] = None,
                request: Optional[LabRequest] = None) -> tuple[str, dict]:
    """(what was done, the settings for the open Chat: speculative, proposer, k, p_min)."""
    say = say or (lambda f, d: None)
    say(0.0, "detecting the hardware")
    machine = hardware.detect()
    lines = [f"This machine: {machine_line(machine)}.", ensure_pair(state, machine, say)]
    req = request or LabRequest(quick=True)
    if not state.generation_lock.acquire(timeout=600):
        raise RuntimeError("another generation kept the pair busy for 10 minutes; try again later")
    try:
        cfg = plan(state.pair, req)
        est = sweep_estimate(state, cfg.total_runs(), cfg.max_tokens)  # until the sweep's own ETA
        with state.doing(Activity(SWEEP, total=cfg.total_runs(), eta_s=est[0] if est else None)) as act:

            def progress(done: int, total: int, what: str, left: Optional[float]) -> None:
                act.done, act.total, act.eta_s = done, total, act.eta_s if left is None else left
                say(0.1 + 0.85 * done / max(total, 1),
                    f"quick sweep: run {done} of {total}, {what}" + (f", about {left:.0f} s left" if left else ""))

            result = run_lab(state.pair, cfg, state.pair_id, progress=progress, cancel=cancel, store_tuned=False)
    finally:
        state.generation_lock.release()
    if cancel is not None and cancel.is_set() and not result.best:
        return " ".join(lines + [f"Stopped after {result.runs_done} of {cfg.total_runs()} runs, before anything "
                                 "was measured; Chat is unchanged."]), {}
    if not result.best:
        return " ".join(lines + ["The quick sweep measured nothing; Chat is unchanged."]), {}
    settings = tuned_settings(result, "all")
    rec = result.recommendations.get("all") or result.best
    stopped = " (stopped early)" if cancel is not None and cancel.is_set() else ""
    lines.append(f"Quick sweep{stopped} ({result.runs_done} runs in {result.duration_s} s, "
                 f"{len(cfg.prompts)} prompts of {cfg.max_tokens} tokens): best was {recommendation_line(rec)}.")
    lines.append(use_draft(state, settings).strip())
    if settings["speculative"]:
        who = proposer_words(settings["proposer"]) if settings["proposer"] != ProposerName.DRAFT else "that draft"
        lines.append(f"Chat now uses {who} "
                     f"with K = {settings['k']}. Not saved as a default: run a full sweep in the Benchmark tab, "
                     "or press Use this there, to keep it.")
    else:
        lines.append("Nothing beat plain decoding here, so Chat now decodes plainly (speculation off).")
    return " ".join(line for line in lines if line), {k: settings[k] for k in APPLIED}
