"""HTML for the live acceptance panel, the counters and the compare results: pure functions.

Every piece of model (or user) text goes through :func:`esc` before it becomes HTML; nothing else in the UI
builds HTML from model text.
"""

from __future__ import annotations

import html
from typing import Optional, Sequence

from app.engine.events import KINDS

KIND_LABELS = {
    "accepted": ("accepted draft", "drafted by the draft model and verified by the target"),
    "corrected": ("target-corrected", "the target's own token where it rejected the draft"),
    "bonus": ("bonus", "the extra target token after a fully accepted draft"),
    "plain": ("plain", "one target step, no speculation"),
}


def esc(text: object) -> str:
    """Escape text for HTML content and attribute values (quotes included)."""
    return html.escape(str(text), quote=True)


def _fmt(value: Optional[float], spec: str = ".2f", suffix: str = "", none: str = "–") -> str:
    return none if value is None else f"{value:{spec}}{suffix}"


def token_title(tok) -> str:
    parts = [f"step {tok.step}"]
    if tok.draft_pos is not None:
        parts.append(f"draft position {tok.draft_pos}")
    if tok.draft_prob is not None:
        parts.append(f"p={tok.draft_prob:.2f}")
    parts.append(KIND_LABELS.get(tok.kind, (tok.kind,))[0])
    return " · ".join(parts)


def tokens_html(tokens: Sequence, cursor: bool = False, empty: str = "") -> str:
    """Coloured spans, one per token, with a hover title (step, draft position, draft probability)."""
    if not tokens:
        body = f'<span class="tdm-empty">{esc(empty)}</span>' if empty else ""
    else:
        body = "".join(
            f'<span class="tdm-tok tdm-{esc(t.kind)}" title="{esc(token_title(t))}">{esc(t.text)}</span>'
            for t in tokens if t.text
        )
    if cursor:
        body += '<span class="tdm-cursor">▍</span>'
    return f'<div class="tdm-tokens">{body}</div>'


def legend_html(kinds: Sequence[str] = KINDS) -> str:
    items = "".join(
        f'<span class="tdm-legend-item" title="{esc(KIND_LABELS[k][1])}">'
        f'<span class="tdm-swatch tdm-{k}"></span>{esc(KIND_LABELS[k][0])}</span>'
        for k in kinds
    )
    return f'<div class="tdm-legend">{items}</div>'


def bars_html(per_position: Sequence[float], max_bars: int = 12) -> str:
    """Per-draft-position acceptance as a small bar chart (inline CSS)."""
    values = list(per_position)[:max_bars]
    if not values:
        return '<div class="tdm-bars tdm-muted">per-position acceptance appears after the first drafts</div>'
    cols = "".join(
        f'<div class="tdm-bar" title="draft position {i}: {v:.0%} accepted">'
        f'<div class="tdm-bar-fill" style="height:{max(v, 0.0) * 100:.0f}%"></div>'
        f'<div class="tdm-bar-label">{i}</div></div>'
        for i, v in enumerate(values)
    )
    return (f'<div class="tdm-bars-wrap"><div class="tdm-bars-title">acceptance by draft position</div>'
            f'<div class="tdm-bars">{cols}</div></div>')


def _stat(label: str, value: str, hint: str = "", cls: str = "") -> str:
    return (f'<div class="tdm-stat {cls}" title="{esc(hint)}"><div class="tdm-stat-value">{esc(value)}</div>'
            f'<div class="tdm-stat-label">{esc(label)}</div></div>')


def counters_html(summary: dict, speculative: bool, baseline: Optional[dict]) -> str:
    """Acceptance rate, tokens per pass, tokens/s, speedup against the measured baseline, predicted bound."""
    tps = summary.get("tokens_per_s") or 0.0
    items = [_stat("tokens/s", f"{tps:.1f}", "generated tokens over decode time (prompt processing excluded)")]
    if speculative:
        items += [
            _stat("acceptance", _fmt(summary.get("acceptance_rate"), ".0%") if summary.get("drafted") else "–",
                  "accepted draft tokens / drafted tokens"),
            _stat("tokens / pass", _fmt(summary.get("mean_accepted"), ".2f"),
                  "mean tokens emitted per target forward pass (1.0 without speculation)"),
            _stat("mean K", _fmt(summary.get("mean_k"), ".1f"), "drafted tokens per target pass"),
        ]
    if baseline:
        base = baseline["tps"]
        speedup = tps / base if tps and base else None
        items.append(_stat("speedup", _fmt(speedup, ".2f", "×"),
                           f"against plain decoding at {base:.1f} tok/s, measured {baseline.get('measured_at', '')}",
                           "tdm-good" if speedup and speedup >= 1 else "tdm-bad" if speedup else ""))
        if speculative:
            bound = summary.get("bound")
            items.append(_stat("predicted", _fmt(bound, ".2f", "×"),
                               "bound from measured α, c, v: (1-α^(γ+1)) / ((1-α)(γc+v)) — "
                               f"α={_fmt(summary.get('alpha'))}, c={_fmt(summary.get('c'), '.3f')}, "
                               f"v={_fmt(summary.get('v'))}"))
        note = f'<div class="tdm-note">baseline: plain decoding {base:.1f} tok/s on this pair and machine</div>'
    else:
        note = ('<div class="tdm-note tdm-warn">No plain-decoding baseline measured for this pair on this machine '
                'yet: press <b>Measure baseline</b> to see the speedup and the predicted bound.</div>')
    out = f'<div class="tdm-stats">{"".join(items)}</div>{note}'
    if speculative:
        out += bars_html(summary.get("per_position") or [])
    return out


def status_html(message: str, kind: str = "info") -> str:
    return f'<div class="tdm-status tdm-status-{esc(kind)}">{esc(message)}</div>' if message else ""


def reason_text(reason: Optional[str]) -> str:
    return {"eog": "finished", "max_tokens": "reached max tokens", "stopped": "stopped",
            "context": "context full"}.get(reason or "", reason or "")


def compare_side_html(title: str, live, greedy: bool) -> str:
    summary = live.summary()
    tps = summary.get("tokens_per_s") or 0.0
    state = ("error" if live.error else reason_text(live.done.reason) if live.done else
             "running" if live.running else "queued")
    head = (f'<div class="tdm-side-head"><b>{esc(title)}</b><span class="tdm-timer">{live.elapsed:.1f}s · '
            f'{len(live.tokens)} tok · {tps:.1f} tok/s · {esc(state)}</span></div>')
    body = tokens_html(live.tokens, cursor=live.running, empty="waiting…" if not live.started else "")
    err = status_html(live.error, "error") if live.error else ""
    return f'<div class="tdm-side">{head}{body}{err}</div>'


def first_difference(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_row_html(result: dict) -> str:
    items = [
        _stat("plain tok/s", _fmt(result.get("plain_tps"), ".1f")),
        _stat("speculative tok/s", _fmt(result.get("spec_tps"), ".1f")),
        _stat("speedup", _fmt(result.get("speedup"), ".2f", "×"), "speculative tok/s ÷ plain tok/s",
              "tdm-good" if (result.get("speedup") or 0) >= 1 else "tdm-bad"),
        _stat("acceptance", _fmt(result.get("acceptance_rate"), ".0%")),
        _stat("tokens / pass", _fmt(result.get("mean_accepted"), ".2f")),
    ]
    if result.get("identical") is True:
        badge = '<span class="tdm-badge tdm-badge-ok">identical output</span>'
    elif result.get("identical") is False and result.get("first_difference") is not None:
        badge = (f'<span class="tdm-badge tdm-badge-diff">outputs differ from token '
                 f'{int(result["first_difference"])}</span>')
    else:
        badge = '<span class="tdm-badge">sampled (T &gt; 0): outputs are not expected to match</span>'
    order = esc(result.get("order", ""))
    return (f'<div class="tdm-stats">{"".join(items)}</div><div class="tdm-row">{badge}'
            f'<span class="tdm-muted">order: {order}</span></div>')


def history_html(history: Sequence[dict]) -> str:
    """The session's comparisons: a small SVG plot of speedup per run and a table."""
    if not history:
        return '<div class="tdm-muted">No comparisons yet in this session.</div>'
    w, h, pad = 360, 120, 22
    top = max(max((r.get("speedup") or 0) for r in history), 1.2)
    n = len(history)
    step = (w - 2 * pad) / max(n, 1)
    y1 = h - pad - (1.0 / top) * (h - 2 * pad)
    bars = []
    for i, r in enumerate(history):
        s = r.get("speedup") or 0.0
        bh = (s / top) * (h - 2 * pad)
        bw = min(step * 0.7, 36.0)
        x = pad + i * step + (step - bw) / 2
        cls = "tdm-svg-good" if s >= 1 else "tdm-svg-bad"
        bars.append(f'<rect class="{cls}" x="{x:.1f}" y="{h - pad - bh:.1f}" width="{bw:.1f}" '
                    f'height="{bh:.1f}"><title>run {i + 1}: {s:.2f}×</title></rect>'
                    f'<text x="{x + bw / 2:.1f}" y="{h - 6}" text-anchor="middle" class="tdm-svg-label">{i + 1}</text>')
    svg = (f'<svg class="tdm-plot" viewBox="0 0 {w} {h}" role="img" aria-label="speedup per run">'
           f'<line x1="{pad}" x2="{w - pad}" y1="{y1:.1f}" y2="{y1:.1f}" class="tdm-svg-ref"/>'
           f'<text x="{w - pad}" y="{y1 - 3:.1f}" class="tdm-svg-label" text-anchor="end">1×</text>'
           f'{"".join(bars)}</svg>')
    rows = "".join(
        f'<tr><td>{i + 1}</td><td>{esc(str(r.get("prompt", ""))[:60])}</td><td>{_fmt(r.get("plain_tps"), ".1f")}</td>'
        f'<td>{_fmt(r.get("spec_tps"), ".1f")}</td><td>{_fmt(r.get("speedup"), ".2f", "×")}</td>'
        f'<td>{_fmt(r.get("acceptance_rate"), ".0%")}</td>'
        f'<td>{"yes" if r.get("identical") else "no" if r.get("identical") is False else "–"}</td></tr>'
        for i, r in enumerate(history)
    )
    table = ('<table class="tdm-table"><tr><th>#</th><th>prompt</th><th>plain tok/s</th><th>spec tok/s</th>'
             f'<th>speedup</th><th>acceptance</th><th>identical</th></tr>{rows}</table>')
    return f'<div class="tdm-history">{svg}{table}</div>'


CSS = """
.tdm-tokens{white-space:pre-wrap;word-break:break-word;font-family:var(--font-mono);font-size:13px;line-height:1.6;
  min-height:120px;max-height:460px;overflow-y:auto;padding:10px;border:1px solid var(--border-color-primary);
  border-radius:8px;background:var(--background-fill-secondary)}
.tdm-tok{border-radius:3px;padding:0 1px}
.tdm-accepted{background:rgba(34,197,94,.28)}
.tdm-corrected{background:rgba(239,68,68,.30)}
.tdm-bonus{background:rgba(59,130,246,.30)}
.tdm-plain{background:rgba(148,163,184,.22)}
.tdm-cursor{animation:tdm-blink 1s steps(2) infinite;color:var(--body-text-color-subdued)}
@keyframes tdm-blink{50%{opacity:0}}
.tdm-empty,.tdm-muted{color:var(--body-text-color-subdued);font-size:12px}
.tdm-legend{display:flex;flex-wrap:wrap;gap:12px;font-size:12px;margin:4px 0}
.tdm-legend-item{display:inline-flex;align-items:center;gap:5px;cursor:help}
.tdm-swatch{display:inline-block;width:14px;height:14px;border-radius:3px}
.tdm-stats{display:flex;flex-wrap:wrap;gap:8px;margin:6px 0}
.tdm-stat{min-width:78px;padding:6px 10px;border-radius:8px;background:var(--background-fill-secondary);
  border:1px solid var(--border-color-primary);cursor:help}
.tdm-stat-value{font-size:18px;font-weight:600;font-variant-numeric:tabular-nums}
.tdm-stat-label{font-size:11px;color:var(--body-text-color-subdued)}
.tdm-good .tdm-stat-value{color:#16a34a}.tdm-bad .tdm-stat-value{color:#dc2626}
.tdm-note{font-size:12px;color:var(--body-text-color-subdued);margin:4px 0}
.tdm-warn{color:#b45309}
.tdm-bars-title{font-size:11px;color:var(--body-text-color-subdued)}
.tdm-bars{display:flex;align-items:flex-end;gap:4px;height:64px;padding:2px 0 14px 0}
.tdm-bar{position:relative;width:18px;height:100%;background:var(--background-fill-secondary);border-radius:3px}
.tdm-bar-fill{position:absolute;bottom:0;width:100%;background:#22c55e;border-radius:3px}
.tdm-bar-label{position:absolute;bottom:-14px;width:100%;text-align:center;font-size:10px}
.tdm-status{padding:6px 10px;border-radius:6px;font-size:13px;margin:4px 0}
.tdm-status-info{background:rgba(59,130,246,.12)}.tdm-status-wait{background:rgba(234,179,8,.18)}
.tdm-status-error{background:rgba(239,68,68,.15);color:#b91c1c}.tdm-status-ok{background:rgba(34,197,94,.15)}
.tdm-side-head{display:flex;justify-content:space-between;align-items:baseline;margin-bottom:4px;gap:8px}
.tdm-timer{font-size:12px;font-variant-numeric:tabular-nums;color:var(--body-text-color-subdued)}
.tdm-row{display:flex;gap:12px;align-items:center;margin:4px 0}
.tdm-badge{padding:3px 10px;border-radius:999px;font-size:12px;background:var(--background-fill-secondary)}
.tdm-badge-ok{background:rgba(34,197,94,.22);color:#15803d}.tdm-badge-diff{background:rgba(239,68,68,.18);color:#b91c1c}
.tdm-plot{width:100%;max-width:420px;height:auto}
.tdm-svg-good{fill:#22c55e}.tdm-svg-bad{fill:#ef4444}.tdm-svg-ref{stroke:#94a3b8;stroke-dasharray:3 3}
.tdm-svg-label{font-size:9px;fill:var(--body-text-color-subdued)}
.tdm-table{font-size:12px;border-collapse:collapse;margin-top:6px}
.tdm-table,.tdm-pairinfo{border:none!important;border-collapse:collapse}
.tdm-table td,.tdm-table th{padding:2px 8px;border:none!important;border-bottom:1px solid var(--border-color-primary)!important;
  text-align:left}
.tdm-pairinfo td,.tdm-pairinfo tr,.tdm-table tr{border:none!important;background:transparent!important}
.tdm-chat .message-content, .tdm-chat .message{white-space:pre-wrap}
.tdm-pairinfo td{padding:2px 10px 2px 0;font-size:13px}
"""
