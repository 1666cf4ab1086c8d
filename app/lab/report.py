"""Pair lab outputs a person can keep or post: the cells as CSV, and a Markdown report with the plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional, Sequence

from app.lab import plots
from app.lab.ranking import noise_words
from app.numfmt import fmt as _fmt, k_text

CSV_FILE, REPORT_FILE, JSON_FILE = "cells.csv", "report.md", "result.json"
CSV_COLUMNS = ("draft", "proposer", "k", "p_min", "speedup", "speedup_min", "speedup_max", "acceptance_rate",
               "mean_accepted", "mean_k", "c", "v", "bound", "tps", "baseline_tps", "prompts", "complete",
               "paused", "per_position")


def write_csv(cells: Sequence[dict], path: Path) -> Path:
    """One row per cell; per-position acceptance as a space-separated list."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for cell in cells:
            row = []
            for col in CSV_COLUMNS:
                value = cell.get(col)
                if col == "per_position":
                    value = " ".join(f"{x:.3f}" for x in value or [])
                elif isinstance(value, float):
                    value = f"{value:.4f}"
                row.append("" if value is None else value)
            writer.writerow(row)
    return path


def k_label(rec: dict) -> str:
    """A sweep cell's or recommendation's K (``numfmt.k_text``)."""
    return k_text(rec.get("k"), p_min=rec.get("p_min"))


def recommendation_line(rec: Optional[dict]) -> str:
    """'SmolLM2…Q4_1, K=4: 1.62x (1.41–1.80x)' or why nothing is recommended."""
    if not rec:
        return "no measurement yet"
    text = (f"{rec['draft']}, K={k_label(rec)}: {_fmt(rec['speedup'], '.2f', 'x')} "
            f"(spread {_fmt(rec.get('speedup_min'), '.2f')}–{_fmt(rec.get('speedup_max'), '.2f', 'x')})")
    if not rec.get("beats_plain", True):
        text = f"off (plain decoding) — the best drafting cell, {text}, is slower than plain decoding here"
    return text


OFF_ROW = {"draft": "off (plain decoding)", "k": "-", "speedup": 1.0}


def cells_table(cells: Sequence[dict]) -> str:
    """Every cell ranked by speedup, with "off" (plain decoding, 1.00x by definition) ranked among them."""
    head = "| draft | K | speedup | spread | repeats | accept | tok/pass | c | v | bound | paused | tok/s | prompts |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in sorted([*cells, OFF_ROW], key=lambda c: -(c["speedup"] or 0)):
        if c is OFF_ROW:
            lines.append(f"| {c['draft']} | - | 1.00x | - | - | - | 1.00 | - | 1.00 | - | - | - | - |")
            continue
        lines.append(
            f"| {c['draft']} | {k_label(c)} | {_fmt(c['speedup'], '.2f', 'x')} | "
            f"{_fmt(c.get('speedup_min'))}–{_fmt(c.get('speedup_max'))} | "
            f"{_fmt(c.get('repeat_min'))}–{_fmt(c.get('repeat_max'))} | {_fmt(c['acceptance_rate'], '.0%')} | "
            f"{_fmt(c['mean_accepted'])} | {_fmt(c['c'])} | {_fmt(c['v'])} | {_fmt(c['bound'], '.2f', 'x')} | "
            f"{_fmt(c.get('paused'), '.0%')} | {_fmt(c.get('tps'), '.1f')} | {c.get('prompts', '-')} |")
    limits = {c["limit"] for c in cells if c.get("limit")}
    lines += ["", *(f"Auto K paused speculation: {text}." for text in sorted(limits))] if limits else []
    return "\n".join(lines)


def markdown(result: dict, meta: Optional[dict] = None, images: Optional[dict] = None) -> str:
    """The shareable report: machine, settings, recommendation per category, cells table, plots."""
    meta = meta or {}
    machine = meta.get("machine") or result.get("machine") or {}
    cfg = result.get("config", {})
    status = "partial (cancelled)" if result.get("partial") else "complete"
    out = [f"# Tandem Pair lab: {meta.get('pair_id') or result.get('pair') or result.get('target')}", ""]
    out += [f"- run: {meta.get('id', '-')} ({status}), {result.get('started_at', '')}, "
            f"{result.get('duration_s', '-')} s, {result.get('runs_done', '-')} runs",
            f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
            f"GPU: {machine.get('gpu', 'none')}, {machine.get('backend', '?')} backend, {machine.get('os', '')}",
            f"- software: llama-cpp-python {machine.get('llama_cpp', '?')}, Python {machine.get('python', '?')}",
            f"- target: {result.get('target', '?')}; prompts: {len(cfg.get('prompts', []))}, "
            f"{cfg.get('max_tokens', '?')} tokens each, temperature {cfg.get('temperature', '?')}, "
            f"repeats {cfg.get('repeats', 1)}{', quick' if cfg.get('quick') else ''}",
            f"- plain decoding: {_fmt(result.get('baseline_tps'), '.1f')} tokens/s (median)", ""]
    if meta.get("standin"):
        out[-1:] = [f"- {meta['standin']} (the text is the small model's, the cost per token the big one's)", ""]
    out += ["## Recommendation", ""]
    for cat, rec in (result.get("recommendations") or {}).items():
        noise = noise_words(rec)
        out.append(f"- **{cat}**: {recommendation_line(rec)}" + (f" — {noise}" if noise else ""))
    out += ["", "## Cells (median over prompts)", "", cells_table(result.get("cells", [])), ""]
    for err in result.get("errors", []):
        out.append(f"- skipped {err['draft']}: {err['error']}")
    if images:
        out += ["## Plots", ""]
        for name, path in images.items():
            out.append(f"![{name.replace('_', ' ')}]({Path(path).name})")
            out.append("")
    cmd = result.get("command")
    if cmd:
        out += ["Reproduce:", "", f"    {cmd}", ""]
    return "\n".join(out)


def write_artifacts(result: dict, folder: Path, meta: Optional[dict] = None) -> dict:
    """CSV, the three PNG plots, result.json and report.md into ``folder``; returns {name: path}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    title = f"Speedup vs K — {result.get('target', '')}" + (" (partial)" if result.get("partial") else "")
    images = plots.write_all(result.get("cells", []), folder, title)
    files = {"csv": write_csv(result.get("cells", []), folder / CSV_FILE), **images}
    (folder / JSON_FILE).write_text(json.dumps(result, indent=2), encoding="utf-8")
    files["json"] = folder / JSON_FILE
    (folder / REPORT_FILE).write_text(markdown(result, meta, images), encoding="utf-8")
    files["report"] = folder / REPORT_FILE
    return {k: str(v) for k, v in files.items()}


def compare_markdown(cmp: dict) -> str:
    """Two runs side by side (``History.compare``)."""
    a, b = cmp["a"], cmp["b"]
    out = [f"Run A: #{a['id']} {a['created_at']} ({a['status']}) — {a['machine_line']}",
           f"Run B: #{b['id']} {b['created_at']} ({b['status']}) — {b['machine_line']}", "",
           "| draft | K | speedup A | speedup B | B − A |", "|---|---|---|---|---|"]
    for r in cmp["rows"]:
        out.append(f"| {r['draft']} | {k_label(r)} | {_fmt(r['speedup_a'], '.2f', 'x')} | "
                   f"{_fmt(r['speedup_b'], '.2f', 'x')} | {_fmt(r['delta'], '+.2f')} |")
    return "\n".join(out)
