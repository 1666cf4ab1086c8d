"""Compare's views: each side while it runs, then both runs replayed side by side at their real timing.

The replay is pure CSS: every token carries an ``animation-delay`` equal to the moment it arrived (from the
start of its run, prompt processing included), each lane's progress bar fills over its run's duration and its
finish line appears when the run ended, so the faster run visibly finishes first. A new ``nonce`` replaces the
HTML and replays it.
"""

from __future__ import annotations

from typing import Optional

from app.engine.events import TokenKind
from app.service import speedup
from app.ui.panel import esc, reason_text, status_html
from app.ui.reply import compact, markdown_box


def side_html(title: str, live) -> str:
    """One side while the comparison runs (each side streams in turn)."""
    tps = live.summary().tokens_per_s
    state = ("error" if live.error else reason_text(live.done.reason) if live.done else
             "running" if live.running else "queued")
    head = (f'<div class="tdm-side-head"><b>{esc(title)}</b><span class="tdm-timer">{live.elapsed:.1f} s · '
            f'{len(live.tokens)} tok · {tps:.1f} tok/s · {esc(state)}</span></div>')
    body = markdown_box(compact(live.tokens, live.draft_texts, live.drafter), cursor=live.running,
                        empty="waiting…" if not live.started else "")
    err = status_html(live.error, "error") if live.error else ""
    return f'<div class="tdm-side">{head}{body}{err}</div>'


def secs(x: float) -> str:
    """Seconds with two decimals below one second, one above."""
    return f"{x:.2f}" if abs(x) < 1 else f"{x:.1f}"


def _duration(live) -> float:
    if live.started is None or live.last is None:
        return 0.0
    return max(live.last - live.started, 0.0)


def _lane(title: str, live, other: float, nonce: int) -> str:
    total = _duration(live)
    toks = compact(live.tokens, live.draft_texts, live.drafter)
    delays = [f' style="animation-delay:{max(at - live.started, 0.0) * 1000:.0f}ms"' for at in live.times]
    body = markdown_box(toks, extra=lambda i: delays[i] if i < len(delays) else "")
    first = total <= other
    finish = (f"finished first · {secs(other - total)} s sooner" if first and other > total else
              f"finished {secs(total - other)} s later" if not first else "finished at the same time")
    return (f'<div class="tdm-lane" data-first="{str(first).lower()}">'
            f'<div class="tdm-lane-head"><b>{esc(title)}</b><span class="tdm-timer">{secs(total)} s · '
            f'{len(live.tokens)} tokens</span></div>'
            f'<div class="tdm-track"><div class="tdm-track-fill" style="animation-duration:{total:.2f}s"></div></div>'
            f'<div class="tdm-finish {"tdm-badge tdm-badge-ok" if first else "tdm-badge"}" '
            f'style="animation-delay:{total * 1000:.0f}ms">{"✓ " if first else ""}{esc(finish)}</div>'
            f'{body}</div>')


def saving_text(plain, spec) -> str:
    """Seconds saved and the speedup from the same decode rates (the result row's), per the same number of
    tokens, with both lengths named when they differ (``speedup.same_length``)."""
    ps, ss = plain.summary(), spec.summary()
    cmp = speedup.same_length(len(plain.tokens), ps.tokens_per_s, len(spec.tokens), ss.tokens_per_s)
    if cmp is None:
        return "no decode rate to compare."
    n, saved = cmp["n"], cmp["saved"]
    if all(t.kind == TokenKind.PLAIN for t in spec.tokens):  # nothing drafted: nothing to save or cost anything
        return (f"nothing was drafted, so both runs decoded plainly: {cmp['ratio']:.2f}× the plain rate, "
                f"{secs(abs(saved))} s over {n} tokens, is timing noise.")
    word = f"{secs(saved)} s saved" if saved >= 0 else f"{secs(-saved)} s lost"
    text = (f"speculation decoded at {cmp['ratio']:.2f}× the plain rate: {n} tokens in {secs(cmp['spec_s'])} s "
            f"instead of {secs(cmp['plain_s'])} s, {word} (prompt processing excluded)")
    if cmp["spec_tokens"] != cmp["plain_tokens"]:
        text += (f". The outputs differ in length (plain {cmp['plain_tokens']} tokens, speculative "
                 f"{cmp['spec_tokens']}), so the runs are compared per token, not by their finish times")
    return text + "."


def race_html(plain, spec, nonce: int = 0) -> Optional[str]:
    """Both finished runs replayed side by side at their real timing; None if either did not finish."""
    if plain.done is None or spec.done is None or not plain.times or not spec.times:
        return None
    tp, ts = _duration(plain), _duration(spec)
    saving = saving_text(plain, spec)
    return (f'<div class="tdm-race-wrap" data-run="{nonce}"><div class="tdm-note tdm-saving">'
            f'{esc(saving[:1].upper() + saving[1:])}</div>'
            f'<div class="tdm-note">Replay at real speed (prompt processing included):</div><div class="tdm-race">'
            f'{_lane("Speculation off (plain)", plain, ts, nonce)}{_lane("Speculation on", spec, tp, nonce)}'
            f'</div></div>')
