"""Pair lab plots as PNG files (matplotlib's Agg canvas directly: no pyplot state, safe in worker threads).

- speedup vs K, one line per draft, with the predicted bound (dashed, same colour) and the min–max spread;
- per-position acceptance: for each draft at its best K, how often draft position i was accepted;
- measured vs predicted speedup: one point per cell against the y = x line;
- the size sweep's two: speedup vs the target's parameters and speedup vs the draft's cost c, each with the bound.

Legends sit below the axes, outside the plotted area, and text is 9-11 pt, so that the figures stay readable
when the app shows two side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from app.engine.names import AUTO_K
from app.models.standin import params_label

PLOTS = {
    "speedup_vs_k": "speedup_vs_k.png",
    "per_position": "per_position.png",
    "measured_vs_predicted": "measured_vs_predicted.png",
}


def k_positions(ks: Sequence) -> dict:
    """x position for each K: integers where they are, 'auto' one step right of the largest."""
    numeric = sorted({k for k in ks if isinstance(k, int)})
    pos: dict = {k: float(k) for k in numeric}
    if any(k == AUTO_K for k in ks):
        pos[AUTO_K] = float((numeric[-1] if numeric else 0) + 1)
    return pos


def _drafts(cells: Sequence[dict]) -> list[str]:
    return list(dict.fromkeys(c["draft"] for c in cells))


def _label(cell: dict) -> str:
    if cell["k"] == AUTO_K and cell.get("p_min") is not None:
        return f"auto p{cell['p_min']:g}"
    return str(cell["k"])


FONT = {"title": 11, "label": 10, "tick": 9, "legend": 9}


def _legend(ax) -> None:
    """The legend under the axes (outside the plotted area), in up to two columns."""
    n = len(ax.get_legend_handles_labels()[1])
    if n:
        ax.legend(fontsize=FONT["legend"], loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(2, n),
                  frameon=False)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    for ax in fig.axes:
        ax.title.set_fontsize(FONT["title"])
        ax.xaxis.label.set_fontsize(FONT["label"])
        ax.yaxis.label.set_fontsize(FONT["label"])
        ax.tick_params(labelsize=FONT["tick"])
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # "tight": the legend below the axes is kept
    return path


def _empty(ax, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def speedup_vs_k(cells: Sequence[dict], path: Path, title: str = "") -> Path:
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    pos = k_positions([c["k"] for c in cells])
    colours: dict = {}
    for i, draft in enumerate(_drafts(cells)):
        rows = sorted((c for c in cells if c["draft"] == draft and c["speedup"] is not None),
                      key=lambda c: (pos[c["k"]], c.get("p_min") or 0))
        if not rows:
            continue
        colour = colours.setdefault(draft, f"C{i % 10}")
        xs = [pos[c["k"]] for c in rows]
        ys = [c["speedup"] for c in rows]
        lo = [c["speedup"] - (c.get("speedup_min") or c["speedup"]) for c in rows]
        hi = [(c.get("speedup_max") or c["speedup"]) - c["speedup"] for c in rows]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=colour, label=f"{draft} (measured)")
        bounds = [(pos[c["k"]], c["bound"]) for c in rows if c.get("bound") is not None]
        if bounds:
            ax.plot(*zip(*bounds), linestyle="--", marker="x", color=colour, alpha=0.7,
                    label=f"{draft} (predicted bound)")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    if pos:
        ax.set_xticks(list(pos.values()), [str(k) for k in pos])
    else:
        _empty(ax)
    ax.set_xlabel("K (draft tokens per target pass)")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.set_title(title or "Speedup vs K (median over prompts, bars: min–max)")
    _legend(ax)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def per_position(cells: Sequence[dict], path: Path) -> Path:
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    drawn = 0
    for i, draft in enumerate(_drafts(cells)):
        rows = [c for c in cells if c["draft"] == draft and c.get("per_position") and c["speedup"] is not None]
        if not rows:
            continue
        best = max(rows, key=lambda c: c["speedup"])
        pp = best["per_position"]
        ax.plot(range(1, len(pp) + 1), pp, marker="o", color=f"C{i % 10}", label=f"{draft} at K={_label(best)}")
        drawn += 1
    if not drawn:
        _empty(ax)
    ax.set_ylim(-0.02, 1.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate at that position")
    ax.set_title("Per-position acceptance (each draft at its best K)")
    _legend(ax)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def measured_vs_predicted(cells: Sequence[dict], path: Path) -> Path:
    fig = Figure(figsize=(6, 4.8))
    ax = fig.add_subplot()
    pts = [(c["bound"], c["speedup"], c) for c in cells if c.get("bound") is not None and c["speedup"] is not None]
    drafts = _drafts(cells)
    for i, draft in enumerate(drafts):
        mine = [(x, y, c) for x, y, c in pts if c["draft"] == draft]
        if mine:
            ax.scatter([p[0] for p in mine], [p[1] for p in mine], color=f"C{i % 10}", label=draft)
            for x, y, c in mine:
                ax.annotate(_label(c), (x, y), fontsize=8, xytext=(3, 3), textcoords="offset points")
    if pts:
        top = max(max(x, y) for x, y, _ in pts) * 1.1
        ax.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=0.8, label="measured = predicted")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        _legend(ax)
    else:
        _empty(ax, "no cell with a predicted bound")
    ax.set_xlabel("predicted speedup (bound from measured alpha, c, v)")
    ax.set_ylabel("measured speedup")
    ax.set_title("Measured vs predicted (labels: K)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_all(cells: Sequence[dict], folder: Path, title: Optional[str] = None) -> dict:
    """All three plots into ``folder``; returns {name: path}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "speedup_vs_k": speedup_vs_k(cells, folder / PLOTS["speedup_vs_k"], title or ""),
        "per_position": per_position(cells, folder / PLOTS["per_position"]),
        "measured_vs_predicted": measured_vs_predicted(cells, folder / PLOTS["measured_vs_predicted"]),
    }


# --- the size sweep (sizes.py): how big must the target be? ------------------------------------------------------

SIZE_PLOTS = {"speedup_vs_size": "speedup_vs_size.png", "speedup_vs_c": "speedup_vs_c.png"}


def _size_tag(row: dict) -> str:
    return f"x{row['factor']} {row['ftype']}"


def speedup_vs_size(rows: Sequence[dict], rec: dict, path: Path) -> Path:
    """Measured speedup (bars: min–max over prompts) and the bound against the target's parameters (log axis),
    the 'pays' threshold, and where the recommendation puts the crossing."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    pts = sorted((r for r in rows if r.get("speedup") is not None), key=lambda r: r["params"])
    if pts:
        xs = [r["params"] / 1e9 for r in pts]
        ys = [r["speedup"] for r in pts]
        lo = [max(0.0, r["speedup"] - (r.get("speedup_min") or r["speedup"])) for r in pts]
        hi = [max(0.0, (r.get("speedup_max") or r["speedup"]) - r["speedup"]) for r in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color="C0", label="measured speedup")
        bounds = [(r["params"] / 1e9, r["bound"]) for r in pts if r.get("bound") is not None]
        if bounds:
            ax.plot(*zip(*bounds), linestyle="--", marker="x", color="C1", zorder=4,  # on top: often equal
                    label="Leviathan bound (same runs)")
        for x, y, r in zip(xs, ys, pts):
            ax.annotate(_size_tag(r), (x, y), fontsize=8, xytext=(4, -12), textcoords="offset points")
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())  # the sizes themselves are the ticks, named as people say them
        ax.set_xticks(xs, [params_label(r["params"]) for r in pts])
        ax.set_xlim(min(xs) / 1.4, max(xs) * 1.4)
    else:
        _empty(ax)
    threshold = rec.get("threshold")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":", label="plain decoding (1.0x)")
    if threshold:
        ax.axhline(threshold, color="C2", linewidth=0.8, linestyle="-.", label=f"pays ({threshold:.1f}x)")
    if rec.get("kind") == "crossing" and rec.get("params"):
        ax.axvline(rec["params"] / 1e9, color="C2", linewidth=1.0, linestyle=":",
                   label=f"pays from ~{params_label(int(rec['params']))}")
    ax.set_xlabel("target size (parameters, log scale)")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.set_title("Speedup vs target size (same draft, stand-in targets)")
    _legend(ax)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def speedup_vs_c(rows: Sequence[dict], path: Path) -> Path:
    """Measured speedup against the draft's cost c at each size, with the bound: each size's own (x) and the
    curve E(α, K) / (K·c + v) at the median α, mean K and v over the sizes."""
    from app.engine.stats import leviathan_bound, median

    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    pts = [r for r in rows if r.get("speedup") is not None and r.get("c") is not None]
    if pts:
        ax.scatter([r["c"] for r in pts], [r["speedup"] for r in pts], color="C0", zorder=3, label="measured speedup")
        for r in pts:
            ax.annotate(_size_tag(r), (r["c"], r["speedup"]), fontsize=8, xytext=(4, 4), textcoords="offset points")
        marks = [(r["c"], r["bound"]) for r in pts if r.get("bound") is not None]
        if marks:
            mark_c, mark_bound = zip(*marks)
            ax.scatter(mark_c, mark_bound, marker="x", s=70, linewidths=2, color="C1", zorder=4,
                       label="bound at each size")  # above the measured point it often sits on
        alpha, k, v = (median(r.get(key) for r in pts) for key in ("alpha", "mean_k", "v"))
        if alpha is not None and k and v:
            top = max(max(r["c"] for r in pts) * 1.2, 0.5)
            cs = [top * i / 100 for i in range(1, 101)]
            ax.plot(cs, [leviathan_bound(alpha, k, c, v) for c in cs], linestyle="--", color="C1", alpha=0.8,
                    label=f"bound at α {alpha:.2f}, K {k:.1f}, v {v:.2f} (medians)")
            ax.set_xlim(0, top)
    else:
        _empty(ax)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("c: a draft token's cost in target steps")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.set_title("Speedup vs the draft's cost c")
    _legend(ax)
    ax.grid(alpha=0.3)
    return _save(fig, path)
