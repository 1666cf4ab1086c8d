"""The Benchmark tab's texts and tables, from results and the stored history: the cells, the recommendation
with its repeat range, what the tab opens on (the latest sweep of the loaded pair, never "No result yet" above
runs), Run A / Run B's defaults, the quick sweep's time estimate from this machine and a running sweep's
elapsed / remaining time, the columns' glossary."""

from __future__ import annotations

from typing import Optional

from app.lab import eta
from app.lab.history import History
from app.lab.lab import LabRequest, plan
from app.lab.ranking import noise_words
from app.lab.report import k_label, recommendation_line
from app.ui import panel
from app.ui.panel import _fmt as _f

CELL_HEADERS = ["draft", "K", "speedup", "spread", "repeats", "accept", "tok/pass", "c", "v", "bound", "tok/s",
                "prompts"]
RUN_HEADERS = ["id", "when", "pair", "status", "kind", "best"]


def cells_rows(result: Optional[dict]) -> list[list]:
    rows = []
    for c in sorted((result or {}).get("cells", []), key=lambda c: -(c["speedup"] or 0)):
        rows.append([c["draft"], k_label(c), _f(c["speedup"], ".2f", "x"),
                     f"{_f(c['speedup_min'])}–{_f(c['speedup_max'])}", _repeats(c), _f(c["acceptance_rate"], ".0%"),
                     _f(c["mean_accepted"]), _f(c["c"]), _f(c["v"]), _f(c["bound"], ".2f", "x"), _f(c["tps"], ".1f"),
                     c["prompts"]])
    for err in (result or {}).get("errors", []):  # a draft that could not be loaded or run: a failed row
        rows.append([err["draft"], "–", "failed", err["error"], *["–"] * 7, 0])
    return rows


def _repeats(cell: dict) -> str:
    lo, hi = cell.get("repeat_min"), cell.get("repeat_max")
    return f"{_f(lo)}–{_f(hi)}" if lo is not None and hi is not None else "one repeat"


def recommendation_md(result: Optional[dict]) -> str:
    if result and result.get("status") == "failed":
        return "\n".join(["**The sweep failed: no draft could be measured.**",
                          *(f"- {err['draft']}: {err['error']}" for err in result.get("errors", []))])
    if not result or not result.get("cells"):
        return "No result yet: run a sweep."
    head = "**Partial result (cancelled)** — " if result.get("partial") else ""
    lines = [f"{head}Plain decoding: {_f(result.get('baseline_tps'), '.1f')} tokens/s. Best per prompt category:"]
    for cat, rec in (result.get("recommendations") or {}).items():
        noise = noise_words(rec)
        lines.append(f"- **{cat}**: {recommendation_line(rec)}" + (f" — {noise}" if noise else ""))
    for err in result.get("errors", []):
        lines.append(f"- skipped {err['draft']}: {err['error']}")
    return "\n".join(lines)


def latest_md(pair_id: Optional[str], hist: History) -> str:
    """What the tab opens on: the latest sweep of the loaded pair with its date, else what the History holds;
    never "No result yet" above a History with runs."""
    run = hist.latest(pair_id)
    if run is not None:
        return (f"**Latest sweep of this pair: run #{run['id']}, {run['created_at']}** ({run['kind']}, "
                f"{run['status']}; **Show A** draws its plots and cells).\n\n{recommendation_md(run['result'])}")
    runs = [r for r in hist.list() if r["kind"] != "sizes"]
    if runs:
        return (f"No sweep of this pair ({pair_id or 'loaded from files'}) yet: the History below holds "
                f"{len(runs)} sweep{'s' * (len(runs) > 1)} of other pairs (**Show A** shows one). Run a sweep to "
                "measure this one.")
    return recommendation_md(None)


def latest_result(pair_id: Optional[str], hist: History) -> Optional[dict]:
    run = hist.latest(pair_id)
    return run["result"] if run else None


def latest_ids(hist: History) -> tuple[str, str]:
    """Run A and Run B: the newest two stored runs' ids ("" where there is none: the fields show a hint)."""
    ids = [str(r["id"]) for r in hist.list(limit=2)]
    return (ids + ["", ""])[0], (ids + ["", ""])[1]


def quick_estimate(state, hist: History) -> Optional[tuple[float, str]]:
    """How long a default quick sweep of the loaded pair takes here, from what this machine measured."""
    if state.pair is None:
        return None
    try:
        cfg = plan(state.pair, LabRequest(quick=True))
    except ValueError:
        return None
    last = next((r["result"] for r in [hist.latest(state.pair_id, ("quick",))] if r), None)
    return eta.estimate(cfg.total_runs(), cfg.max_tokens, last, state.baseline_tps())


def quick_md(state, hist: History) -> str:
    return f"Quick sweep of this pair here: {eta.words(quick_estimate(state, hist))}"


def lab_glossary_html() -> str:
    """The cells' columns in the Chat glossary's words (α, c, v, bound = the Chat's "speedup, estimate")."""
    words = dict(panel.GLOSSARY)
    terms = [("speedup", "Median over the prompts of the speculative run's tokens/s divided by the plain run's "
                         "tokens/s, measured here; spread: the smallest and largest over the prompts."),
             ("repeats", "The repeat range: with two or more passes over the prompts, each pass's median speedup; "
                         "the smallest and largest of them. A recommendation whose lead over the next-best cell is "
                         "smaller than this is within noise: another sweep may pick the other one."),
             ("accept", words.get(panel.ACCEPTANCE)), ("tok/pass", words.get("tokens / pass")), ("K", words.get("K")),
             ("α (alpha)", words.get("α (alpha)")), ("c", words.get(panel.COST_C)), ("v", words.get("v")),
             ("bound", "The speedup predicted from this cell's measured α, K, c and v (the Chat's \"speedup, "
                       "estimate\"): (1 − α^(K+1)) / ((1 − α)(K·c + v)). Dashed in Speedup vs K; Measured vs "
                       "predicted sets the two side by side.")]
    rows = "".join(f"<dt>{panel.esc(term)}</dt><dd>{panel.esc(text)}</dd>" for term, text in terms if text)
    return f'<dl class="tdm-glossary">{rows}</dl>'


def history_rows(hist: History) -> list[list]:
    return [[r["id"], r["created_at"], r["pair_id"] or "–", r["status"], r["kind"],
             recommendation_line(r["best"]) if r["best"] else "–"] for r in hist.list()]


def running_words(elapsed: float, done: int, total: int) -> str:
    """'12 s elapsed, ≈ 30 s left (estimate at this sweep's pace)'."""
    left = eta.remaining(elapsed, done, total)
    rest = f", ≈ {left:.0f} s left (estimate at this sweep's pace)" if left is not None else ""
    return f"{elapsed:.0f} s elapsed{rest}"
