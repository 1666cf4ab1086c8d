"""Ranking a sweep's cells into recommendations, with how far noise reaches: pure functions on cells.

A cell's speedup is the median over its prompts; with two or more repeats, each repeat also gives one (the median
over the prompts of that repeat's runs), and the smallest and largest of those are the cell's *repeat range*:
how much the same setting moved from one pass over the prompts to the next on this machine. A recommendation
whose lead over the next-best cell is smaller than that range (the wider of the two cells') is *within noise*:
another sweep may well pick the other one.
"""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

from app.numfmt import k_text


def repeat_speedups(runs: Sequence[Sequence[float]]) -> list[float]:
    """Per repeat, the median over the prompts of that repeat's speedup (``runs``: per prompt, its runs'
    speedups in repeat order; a prompt without a run in a repeat is left out of that repeat)."""
    out = []
    for r in range(max((len(x) for x in runs), default=0)):
        values = [x[r] for x in runs if len(x) > r]
        out.append(statistics.median(values))
    return out


def repeat_range(runs: Sequence[Sequence[float]]) -> tuple[Optional[float], Optional[float]]:
    """(smallest, largest) of ``repeat_speedups``; (None, None) with fewer than two repeats."""
    per = repeat_speedups(runs)
    return (min(per), max(per)) if len(per) >= 2 else (None, None)


def width(lo: Optional[float], hi: Optional[float]) -> Optional[float]:
    return hi - lo if lo is not None and hi is not None else None


def within_noise(lead: float, *spreads: Optional[float]) -> Optional[bool]:
    """Whether a lead is smaller than the widest of the repeat ranges given (None: no repeat range known)."""
    known = [s for s in spreads if s is not None]
    return lead < max(known) if known else None


def best_cell(cells: Sequence, category: Optional[str] = None) -> Optional[dict]:
    """The cell (``tune.Cell``) with the highest median speedup over the prompts of ``category`` (all when
    None), as the recommendation the result, the history and the tuned settings keep: with its spread over the
    prompts, its repeat range, the next-best cell and whether the lead over it is within noise."""
    scored = []
    for cell in cells:
        rows = [p for p in cell.per_prompt if category in (None, "all") or p.category == category]
        speedups = [p.speedup for p in rows if p.speedup is not None]
        if speedups:
            lo, hi = repeat_range([p.runs for p in rows if p.runs])
            scored.append((statistics.median(speedups), min(speedups), max(speedups), lo, hi, cell))
    if not scored:
        return None
    scored.sort(key=lambda t: -t[0])
    med, lo, hi, rep_lo, rep_hi, cell = scored[0]
    rec = {"draft": cell.draft, "proposer": cell.proposer, "draft_path": cell.draft_path,
           "k": cell.k, "p_min": cell.p_min, "speedup": med, "speedup_min": lo, "speedup_max": hi,
           "bound": cell.bound, "category": category or "all", "beats_plain": med > 1.0,
           "repeat_min": rep_lo, "repeat_max": rep_hi, "next": None, "within_noise": None}
    if len(scored) > 1:
        n_med, _, _, n_lo, n_hi, other = scored[1]
        rec["next"] = {"draft": other.draft, "k": other.k, "p_min": other.p_min, "speedup": n_med,
                       "repeat_min": n_lo, "repeat_max": n_hi}
        rec["within_noise"] = within_noise(med - n_med, width(rep_lo, rep_hi), width(n_lo, n_hi))
    return rec


def recommend(cells: Sequence, categories: Sequence[str]) -> dict:
    """Best (draft, K, p_min) overall ('all') and per prompt category."""
    out = {"all": best_cell(cells)}
    for cat in dict.fromkeys(categories):
        out[cat] = best_cell(cells, cat)
    return {k: v for k, v in out.items() if v is not None}


def noise_words(rec: dict) -> str:
    """'' without a repeat range; else the range and whether the lead over the next-best cell is within it."""
    lo, hi = rec.get("repeat_min"), rec.get("repeat_max")
    if lo is None or hi is None:
        return ""
    text = f"repeats {lo:.2f}–{hi:.2f}x"
    nxt = rec.get("next")
    if nxt and rec.get("within_noise") is not None:
        other = f"{nxt['draft']}, K={k_text(nxt.get('k'), p_min=nxt.get('p_min'))} ({nxt['speedup']:.2f}x)"
        lead = rec["speedup"] - nxt["speedup"]
        text += (f"; within noise: its lead of {lead:.2f} over {other} is smaller than the repeat-to-repeat range"
                 if rec["within_noise"] else f"; its lead of {lead:.2f} over {other} is beyond the repeat range")
    return text
