"""Compare tab: one prompt with speculation off and on, each side streaming in turn, then both replayed as a
race at their real timing, plus the session's history of comparisons."""

from __future__ import annotations

import re

import gradio as gr

from app.errors import ui_message
from app.service import chat, settings as S, speedup
from app.service.state import AppState, session_key
from app.ui import controls, panel, race
from app.ui.controls import GEN
from app.ui.tabs.chat import WAITING

EXAMPLES = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Summarise the water cycle in three sentences.",
    "List five tips for writing clear emails.",
]
EMPTY = ('<div class="tdm-race"><div class="tdm-lane"><b>Speculation off (plain)</b><div class="tdm-empty">'
         'Run a comparison: each side streams in turn, then both are replayed side by side at their real speed.'
         '</div></div><div class="tdm-lane"><b>Speculation on</b></div></div>')


def arena_html(plain, spec) -> str:
    """Both sides while they run (each from a cold cache, one after the other)."""
    return (f'<div class="tdm-race">{race.side_html("Speculation off (plain)", plain)}'
            f'{race.side_html("Speculation on", spec)}</div>')


def replay(html: str) -> str:
    """The same race with the next nonce, so the page replaces it and the animation starts over."""
    return re.sub(r'data-run="(\d+)"', lambda m: f'data-run="{int(m.group(1)) + 1}"', html or "", count=1)


def build(state: AppState) -> controls.Controls:
    runs = gr.State([])  # this session's comparisons (payload dicts)
    last_race = gr.State("")
    with gr.Row():
        prompt = gr.Textbox(label="Prompt", lines=2, scale=6, elem_id="tdm-compare-prompt",
                            placeholder="One prompt, run with speculation off and on (alternating which goes first)")
        with gr.Column(scale=1, min_width=120):
            run = gr.Button("Compare", variant="primary", elem_id="tdm-compare-run")
            stop = gr.Button("Stop", variant="stop", size="sm", elem_id="tdm-compare-stop")
    gr.Examples(EXAMPLES, inputs=[prompt], label="Try")
    status = gr.HTML("", elem_id="tdm-compare-status")
    arena = gr.HTML(EMPTY, elem_id="tdm-compare-arena")
    replay_btn = gr.Button("Replay the race", size="sm", visible=False, elem_id="tdm-compare-replay")
    result = gr.HTML("", elem_id="tdm-compare-result")
    with gr.Accordion("This session's comparisons", open=True):
        hist_view = gr.HTML(panel.history_html([]), elem_id="tdm-compare-history")
    ctrl = controls.build(state, "compare", speculation_switch=False)

    def announce(request: gr.Request):
        state.stop_event(session_key(request))  # armed now: a Stop before the runs start still counts
        note = panel.status_html(WAITING, "wait") if state.busy else panel.status_html("Starting…", "info")
        return note, ""

    def compare_ui(request: gr.Request, text: str, history: list, *values):
        keep = gr.update()
        idle = (keep, keep, keep, keep, keep, keep)  # arena, result, runs, history view, race, replay button

        def say(message: str, kind: str = "info"):
            return (idle[0], idle[1], panel.status_html(message, kind), *idle[2:])

        if not text or not text.strip():
            yield say("Type a prompt first.")
            return
        try:
            resolved = S.resolve(ctrl.to_dict(values), S.defaults(state.defaults))
        except S.SettingsError as exc:
            yield say(str(exc), "error")
            return
        greedy = resolved["temperature"] <= 0
        stop_ev = state.armed_stop_event(session_key(request))
        payload, plain, spec = None, None, None
        try:
            for st, plain, spec, order in chat.compare_stream(state, text, resolved, stop_ev, len(history)):
                if st == "waiting":
                    yield say(WAITING, "wait")
                    continue
                payload = chat.compare_payload(plain, spec, resolved, order, text, st)
                note = panel.status_html(f"Running ({order})…", "info") if st != "done" else ""
                yield arena_html(plain, spec), keep, note, keep, keep, keep, gr.update(visible=False)
        except Exception as exc:
            yield say(ui_message(exc), "error")
            return
        if payload is None:
            return
        if payload["error"]:
            yield keep, "", panel.status_html(payload["error"], "error"), keep, keep, keep, keep
            return
        if payload["identical"] is None:  # stopped before both finished
            yield keep, "", panel.status_html("Stopped: no result recorded.", "info"), keep, keep, keep, keep
            return
        history = (history + [payload])[-20:]
        sig = speedup.signature(state.baseline_key(), state.draft_path, resolved)
        speedup.remember_compare(state.recent, sig, payload)
        shown = race.race_html(plain, spec, len(history)) or arena_html(plain, spec)
        yield (shown, panel.compare_row_html(_row(payload, greedy)), "", history, panel.history_html(history),
               shown, gr.update(visible=True))

    def do_stop(request: gr.Request):
        stopped = state.request_stop(session_key(request))
        return panel.status_html("Stopping…" if stopped else "Nothing is running.", "info")

    def do_replay(html: str):
        again = replay(html)
        return again, again

    outputs = [arena, result, status, runs, hist_view, last_race, replay_btn]
    for trigger in (run.click, prompt.submit):
        trigger(announce, None, [status, result], queue=False, api_visibility="private").then(
            compare_ui, [prompt, runs, *ctrl.components], outputs, api_visibility="private", show_progress="hidden",
            **GEN)
    stop.click(do_stop, None, [status], queue=False, api_visibility="private")
    replay_btn.click(do_replay, [last_race], [arena, last_race], queue=False, api_visibility="private",
                     show_progress="hidden")
    return ctrl


def _row(payload: dict, greedy: bool) -> dict:
    row = dict(payload)
    if not greedy:
        row["identical"] = None  # sampled runs are not expected to match: no badge either way
    return row
