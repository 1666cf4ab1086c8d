"""Compare tab: one prompt with speculation off and on, each side streaming in turn, then both replayed as a
race at their real timing, plus the session's history of comparisons.

``layout`` places the components, ``wire`` connects their events to the handlers below it (module functions
that take the app state; the wiring's closures only hand it over)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

import gradio as gr

from app.errors import ui_message
from app.service import chat, settings as S, speedup
from app.service.runner import RunStatus
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


@dataclass
class View:
    """The tab's components (``layout``), for the event wiring (``wire``)."""

    prompt: Any
    run: Any
    stop: Any
    status: Any
    arena: Any
    replay_btn: Any
    result: Any
    hist_view: Any
    runs: Any  # gr.State: this session's comparisons (payload dicts)
    last_race: Any  # gr.State: the latest race, for Replay
    local: controls.Controls  # the tab's own (the reply length); the shared ones are in Pair settings
    settings_line: Any
    goto: Any


def build(state: AppState, gen: controls.Controls, view: View | None = None) -> View:
    """Wire the tab (laid out by ``layout``, or here) to the shared settings ``gen`` (Pair settings)."""
    view = view or layout(state)
    wire(state, view, view.local + gen)
    return view


def layout(state: AppState) -> View:
    runs = gr.State([])
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
    local = controls.build_local(state, "compare", speculation_switch=False)
    with gr.Row(equal_height=True):
        settings_line = gr.HTML("", elem_id="tdm-compare-settings")
        goto = gr.Button("Change in Pair settings", size="sm", scale=0, min_width=120, elem_id="tdm-compare-goto")
    return View(prompt, run, stop, status, arena, replay_btn, result, hist_view, runs, last_race, local,
                settings_line, goto)


def wire(state: AppState, v: View, ctrl: controls.Controls) -> None:
    def on_announce(request: gr.Request):
        return announce(state, request)

    def on_compare(request: gr.Request, text: str, history: list, *values):
        yield from compare(state, ctrl, request, text, history, *values)

    def on_stop(request: gr.Request):
        return stop(state, request)

    outputs = [v.arena, v.result, v.status, v.runs, v.hist_view, v.last_race, v.replay_btn]
    for trigger in (v.run.click, v.prompt.submit):
        trigger(on_announce, None, [v.status, v.result], queue=False, api_visibility="private").then(
            on_compare, [v.prompt, v.runs, *ctrl.components], outputs, api_visibility="private",
            show_progress="hidden", **GEN)
    v.stop.click(on_stop, None, [v.status], queue=False, api_visibility="private")
    v.replay_btn.click(replay_both, [v.last_race], [v.arena, v.last_race], queue=False, api_visibility="private",
                       show_progress="hidden")


# --- the handlers ---------------------------------------------------------------------------------------------

def announce(state: AppState, request: gr.Request) -> tuple:
    state.stop_event(session_key(request))  # armed now: a Stop before the runs start still counts
    note = panel.status_html(WAITING, "wait") if state.busy else panel.status_html("Starting…", "info")
    return note, ""


def compare(state: AppState, ctrl: controls.Controls, request: gr.Request, text: str, history: list,
            *values) -> Iterator[tuple]:
    """Both runs streamed in turn, then the race, the result row and the session's history."""
    keep = gr.update()
    idle = (keep, keep, keep, keep, keep, keep)  # arena, result, runs, history view, race, replay button

    def say(message: str, kind: str = "info"):
        return (idle[0], idle[1], panel.status_html(message, kind), *idle[2:])

    if not text or not text.strip():
        yield say("Type a prompt first.")
        return
    wrong = controls.problem(ctrl.to_dict(values))
    if wrong:  # out of range: refused with the range named, never changed
        yield say(f"{wrong} Change it in Pair settings.", "error")
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
            if st == RunStatus.WAITING:
                yield say(WAITING, "wait")
                continue
            payload = chat.compare_payload(plain, spec, resolved, order, text, st)
            note = panel.status_html(f"Running ({order})…", "info") if st != RunStatus.DONE else ""
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
    row = panel.compare_row_html(_row(payload, greedy), spec.summary()) + _standin_note(state)
    yield shown, row, "", history, panel.history_html(history), shown, gr.update(visible=True)


def _standin_note(state: AppState) -> str:
    note = state.target_caption()
    return f'<div class="tdm-note">Target: {panel.esc(note)}</div>' if note else ""


def stop(state: AppState, request: gr.Request) -> str:
    stopped = state.request_stop(session_key(request))
    return panel.status_html("Stopping…" if stopped else "Nothing is running.", "info")


def replay_both(html: str) -> tuple[str, str]:
    again = replay(html)
    return again, again


def _row(payload: dict, greedy: bool) -> dict:
    row = dict(payload)
    if not greedy:
        row["identical"] = None  # sampled runs are not expected to match: no badge either way
    return row
