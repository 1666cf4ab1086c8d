"""What a size sweep (``sizes.py``) gives a person: the one-line recommendation, the plots, a CSV and a Markdown
report, and a Pair lab history run (its sizes stored as the run's cells, so the History lists, shows, compares
and deletes it like any other run)."""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from app.lab import plots
from app.lab.history import History, artifacts_root
from app.lab.sizes import Load, Progress, SizeConfig, SizePlan, sweep
from app.lab.tuned import machine_info
from app.models.standin import params_label
from app.numfmt import fmt as _f

PAYS = 1.1  # a speedup that counts as paying: interleaved runs still drift by several percent
CSV_COLUMNS = ("factor", "ftype", "params", "file_bytes", "baseline_tps", "spec_tps", "speedup", "speedup_min",
               "speedup_max", "acceptance_rate", "mean_accepted", "alpha", "mean_k", "c", "v", "bound",
               "efficiency", "identical", "prompts")


def recommend(rows: Sequence[dict], threshold: float = PAYS) -> dict[str, Any]:
    """Where the measured speedup crosses ``threshold``, from rows with ``params``, ``speedup`` and ``label``:
    ``kind`` crossing (``params``: interpolated in log parameters between the last size below and the first
    from which every larger size pays), all (the smallest already pays), none (the largest does not) or
    nothing (no size measured); ``line``: the sentence for people."""
    pts = sorted((r for r in rows if r.get("speedup") is not None and r.get("params")), key=lambda r: r["params"])
    out: dict[str, Any] = {"threshold": threshold, "params": None}
    if not pts:
        return dict(out, kind="nothing", line="Nothing measured yet: run the size sweep.")
    first = next((i for i in range(len(pts)) if all(p["speedup"] >= threshold for p in pts[i:])), None)
    best = max(pts, key=lambda p: p["speedup"])
    if first is None:
        return dict(out, kind="none", line=(
            f"On this machine no size measured pays (at least {threshold:.1f}x): the largest, "
            f"{_size(pts[-1])}, ran at {pts[-1]['speedup']:.2f}x (best {_size(best)} at {best['speedup']:.2f}x) — "
            f"a draft of this cost pays here only for targets above {params_label(pts[-1]['params'])} "
            "parameters, if at all."))
    if first == 0:
        return dict(out, kind="all", params=float(pts[0]["params"]), line=(
            f"On this machine a draft pays at every size measured, from {params_label(pts[0]['params'])} "
            f"parameters ({pts[0]['speedup']:.2f}x) to {params_label(pts[-1]['params'])} "
            f"({pts[-1]['speedup']:.2f}x): even the smallest target here is big enough next to its draft."))
    lo, hi = pts[first - 1], pts[first]
    t = (threshold - lo["speedup"]) / (hi["speedup"] - lo["speedup"]) if hi["speedup"] != lo["speedup"] else 0.5
    t = min(max(t, 0.0), 1.0)
    cross = math.exp(math.log(lo["params"]) + t * (math.log(hi["params"]) - math.log(lo["params"])))
    return dict(out, kind="crossing", params=cross, line=(
        f"On this machine a draft pays (at least {threshold:.1f}x) for targets above ~{params_label(int(cross))} "
        f"parameters: {_size(lo)} ran at {lo['speedup']:.2f}x, {_size(hi)} at {hi['speedup']:.2f}x."))


def _size(row: dict) -> str:
    return f"x{row['factor']} ({params_label(row['params'])})" if row.get("factor") else row.get("label", "?")


def cells(rows: Sequence[dict], k: Any) -> list[dict]:
    """The sizes as the history's cells: the size in the cell's 'draft' place (the one thing that varies)."""
    return [{"draft": f"target {r['label']}", "k": k, "p_min": None, "speedup": r["speedup"],
             "speedup_min": r["speedup_min"], "speedup_max": r["speedup_max"],
             "acceptance_rate": r["acceptance_rate"], "mean_accepted": r["mean_accepted"], "c": r["c"],
             "v": r["v"], "bound": r["bound"], "tps": r["spec_tps"], "prompts": r["prompts"]} for r in rows]


def best(rows: Sequence[dict], k: Any) -> Optional[dict]:
    """The fastest size, as a recommendation line reads it (the history's 'best' column)."""
    measured = [c for c in cells(rows, k) if c["speedup"] is not None]
    if not measured:
        return None
    top = max(measured, key=lambda c: c["speedup"])
    return {**top, "beats_plain": top["speedup"] > 1.0}


def write_csv(rows: Sequence[dict], path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else f"{row[c]:.4f}" if isinstance(row.get(c), float)
                             else row[c] for c in CSV_COLUMNS])
    return path


def table(rows: Sequence[dict]) -> list[str]:
    """The sizes as Markdown table lines."""
    out = ["| target | parameters | plain tok/s | c | accept | speedup | spread | bound | efficiency | same |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = "-" if r.get("identical") is None else "yes" if r["identical"] else "NO"
        out.append(f"| {r['label']} | {params_label(r['params'])} | {_f(r['baseline_tps'], '.1f')} | {_f(r['c'])} | "
                   f"{_f(r['acceptance_rate'], '.0%')} | {_f(r['speedup'], '.2f', 'x')} | "
                   f"{_f(r['speedup_min'])}–{_f(r['speedup_max'])} | {_f(r['bound'], '.2f', 'x')} | "
                   f"{_f(r['efficiency'])} | {same} |")
    return out


def markdown(result: dict, images: dict) -> str:
    cfg, machine = result.get("config", {}), result.get("machine") or {}
    out = [f"# Tandem Pair lab: how big must the target be? ({result.get('pair') or result.get('target')})", "",
           f"- run: {result.get('run_id', '-')} ({result.get('status', '')}), {result.get('started_at', '')}, "
           f"{result.get('duration_s', '-')} s",
           f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, GPU: "
           f"{machine.get('gpu', 'none')}, {machine.get('backend', '?')} backend",
           f"- source target {result.get('target')}, draft {result.get('draft')}; stand-ins write the source's "
           "exact text at a bigger model's cost",
           f"- {len(cfg.get('prompts', []))} prompts x {cfg.get('max_tokens')} tokens, K = {cfg.get('k')}, the "
           f"draft model alone, greedy, repeats {cfg.get('repeats')}", "",
           "## Recommendation", "", (result.get("recommendation") or {}).get("line", ""), "",
           "## Sizes (medians over prompts)", "", *table(result.get("rows", [])), ""]
    out += [f"- {r['label']}: {r['draft_cache']}" for r in result.get("rows", []) if r.get("draft_cache")]
    out += [f"- skipped {s['size']}: {s['reason']}" for s in result.get("skipped", [])]
    out += ["", "## Plots", ""] + [f"![{name.replace('_', ' ')}]({Path(p).name})\n" for name, p in images.items()]
    if result.get("command"):
        out += ["Reproduce:", "", f"    {result['command']}", ""]
    return "\n".join(out)


def write_artifacts(result: dict, folder: Path) -> dict:
    """The two plots, sizes.csv, result.json and report.md into ``folder``; returns {name: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    rows, rec = result.get("rows", []), result.get("recommendation") or {}
    images = {"speedup_vs_size": plots.speedup_vs_size(rows, rec, folder / plots.SIZE_PLOTS["speedup_vs_size"]),
              "speedup_vs_c": plots.speedup_vs_c(rows, folder / plots.SIZE_PLOTS["speedup_vs_c"])}
    files = {**images, "csv": write_csv(rows, folder / "sizes.csv")}
    (folder / "report.md").write_text(markdown(result, images), encoding="utf-8")
    files["report"] = folder / "report.md"
    return {k: str(v) for k, v in files.items()}


def run_sizes(source: Path, draft: Path, plans: Sequence[SizePlan], cfg: SizeConfig, load: Load,
              pair_id: Optional[str] = None, progress: Optional[Progress] = None,
              cancel: Optional[threading.Event] = None, command: Optional[str] = None,
              history: Optional[History] = None) -> dict:
    """The sweep with a history run (running -> complete | partial | failed) and its artifacts in
    ``TANDEM_HOME/pairlab/run-NNNN/``; returns the result's JSON dict (also ``tune --sizes --json``)."""
    machine, hist = machine_info(), history or History()
    run_id = hist.start(pair_id, Path(source).name, cfg.describe(), machine)
    started = time.time()
    try:
        measured = sweep(Path(source), Path(draft), plans, cfg, load, progress, cancel)
        rows = [r.to_dict() for r in measured.rows]
        result: dict[str, Any] = {
            "kind": "sizes", "rows": rows, "recommendation": recommend(rows), "skipped": measured.skipped,
            "plans": [p.to_dict() for p in plans], "partial": measured.partial,
            "cells": cells(rows, cfg.k), "best": best(rows, cfg.k), "recommendations": {},
            "target": Path(source).name, "draft": Path(draft).name, "config": cfg.describe(),
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "duration_s": round(time.time() - started, 1), "pair": pair_id, "run_id": run_id, "machine": machine,
            "command": command,
            "status": ("partial" if measured.partial else "complete") if rows else "failed"}
        folder = artifacts_root() / f"run-{run_id:04d}"
        result["files"] = write_artifacts(result, folder)
        (folder / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
        hist.finish(run_id, result, status=result["status"], artifacts=folder)
    except BaseException as exc:
        hist.fail(run_id, f"{type(exc).__name__}: {exc}")
        raise
    return result
