"""What the Chat tab renders besides the replies themselves: the conversation with its queued messages and what
they wait for, the counters beside it (idle, after a reload, for a reply) and "Measure plain speed"."""

from __future__ import annotations

import time
from typing import Sequence

import gradio as gr

from app.errors import ui_message
from app.service import speedup
from app.service.baseline import measure_baseline, measure_plain
from app.service.chatqueue import Sessions
from app.service.state import AppState, session_key
from app.ui import panel, reply

EMPTY = "Ask something. Each reply is coloured by where its tokens came from; click a red one to see what " \
        "the draft had proposed."


def display(history: list[dict], live: dict | None = None, queued: Sequence[str] = (), waits: str = "") -> str:
    """The conversation as HTML: stored messages, the reply streaming now, then the queued messages; ``waits``:
    what the first queued message waits for, where no reply of this conversation runs."""
    msgs = list(history) + ([live] if live else []) + [
        {"role": "user", "content": t, "queued": True, "waits": waits if i == 0 else ""} for i, t in enumerate(queued)]
    return reply.conversation_html(msgs, empty=EMPTY)


def waits_for(state: AppState) -> str:
    return f"waiting for {state.holder()}"


def waiting(state: AppState) -> str:
    """The status while another generation holds the pair: what it is, and its progress where known."""
    return panel.status_html(f"Waiting for another generation to finish: {state.holder()}; yours starts next.",
                             "wait")


def plain_messages(history: list[dict]) -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in history]


def idle_counters(state: AppState, restored: bool = False) -> str:
    """Before any reply (or after a reload, whose conversation comes back without its counters): the stored
    plain speed, with its age and conditions."""
    b = state.baseline()
    if not b:
        note = ("Plain speed not measured for this pair on this machine yet: speedups will be the model's "
                "estimate until you press Measure plain speed.")
    else:
        when = speedup.age(speedup.stamp_age(b.get("measured_at")))
        note = (f"Plain speed of this pair here: {b['tps']:.1f} tok/s, measured {when} ({b.get('measured_at')}, "
                f"{b.get('tokens', '?')} tokens, {b.get('backend', '?')} backend).")
    first = ("The page was reloaded: the counters of the replies above were not kept; the next reply shows its own."
             if restored else "No reply yet.")
    return f'<div class="tdm-note">{first}</div><div class="tdm-note">{panel.esc(note)}</div>'


def reply_counters(state: AppState, last: dict) -> tuple[str, dict | None]:
    """Counters for the latest reply and the speedup claimed for it (measured, estimated or none)."""
    summary, spec = last["summary"], last["speculative"]
    claim = speedup.choose(summary, spec, last.get("plain"), state.baseline())
    notes = []
    measured = claim is not None and claim["kind"] == "measured"  # then it is the one speedup shown
    ref = speedup.last_compare(state.recent, speedup.signature(state.baseline_key(), state.draft_path,
                                                               last["resolved"])) if spec and not measured else None
    if ref and ref.get("speedup"):
        notes.append(f"Compare with these settings measured {ref['speedup']:.2f}× "
                     f"{speedup.age(time.time() - ref['at'])} on “{str(ref.get('prompt', ''))[:40]}”.")
    return panel.counters_html(summary, spec, claim, notes) + panel.tree_html(last.get("tree")), claim


def line_for(last: dict, claim: dict | None) -> str:
    saved = speedup.seconds_saved(last["summary"], claim)
    r = last["resolved"]
    return panel.reply_line(last["summary"], last["speculative"], r["proposer"], r["k"], saved,
                            claim["kind"] if claim else None)




def do_measure(state: AppState, sessions: Sessions, request: gr.Request, last_run: dict):
    key, keep = session_key(request), gr.update()
    if sessions.active(key):
        return keep, keep, panel.status_html("Wait for the reply to finish first.", "info"), keep
    if state.pair is None:
        return keep, keep, panel.status_html("Load a pair first (Pair settings).", "error"), keep
    try:
        if not last_run.get("messages"):
            b = measure_baseline(state)
            msg = f"Plain decoding: {b['tps']:.1f} tok/s on this pair and machine (stored for later)."
            return keep, idle_counters(state), panel.status_html(msg, "ok"), keep
        b = measure_plain(state, last_run["messages"], last_run["resolved"], last_run["summary"].tokens or 1)
    except Exception as exc:
        return keep, keep, panel.status_html(ui_message(exc), "error"), keep
    last_run = dict(last_run, plain={"tps": b["tps"], "at": time.time(), "reply_at": last_run["at"]})
    view, claim_ = reply_counters(state, last_run)
    hist = sessions.history(key)
    if hist and hist[-1]["role"] == "assistant":
        hist[-1] = dict(hist[-1], line=line_for(last_run, claim_))
        sessions.set_history(key, hist)
    msg = f"Plain decoding of the same prompt: {b['tps']:.1f} tok/s ({b['tokens']} tokens), just now."
    return display(hist), view, panel.status_html(msg, "ok"), last_run

