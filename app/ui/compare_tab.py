"""Compare tab: one prompt with speculation off and on, side by side, plus a session history."""

from __future__ import annotations

import gradio as gr

from app.ui import api, controls, panel
from app.ui import settings as S
from app.ui.chat_tab import GEN, WAITING
from app.ui.runner import describe_error
from app.ui.state import AppState, session_key

EXAMPLES = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Summarise the water cycle in three sentences.",
    "List five tips for writing clear emails.",
]


def build(state: AppState) -> controls.Controls:
    runs = gr.State([])  # this session's comparisons (payload dicts)
    with gr.Row():
        prompt = gr.Textbox(label="Prompt", lines=2, scale=6, elem_id="tdm-compare-prompt",
                            placeholder="One prompt, run with speculation off and on (alternating which goes first)")
        with gr.Column(scale=1, min_width=120):
            run = gr.Button("Compare", variant="primary", elem_id="tdm-compare-run")
            stop = gr.Button("Stop", variant="stop", size="sm", elem_id="tdm-compare-stop")
    gr.Examples(EXAMPLES, inputs=[prompt], label="Try")
    status = gr.HTML("")
    with gr.Row(equal_height=True):
        plain_view = gr.HTML(_side("Speculation off (plain)"), elem_id="tdm-compare-plain")
        spec_view = gr.HTML(_side("Speculation on"), elem_id="tdm-compare-spec")
    result = gr.HTML("", elem_id="tdm-compare-result")
    with gr.Accordion("This session's comparisons", open=True):
        hist_view = gr.HTML(panel.history_html([]), elem_id="tdm-compare-history")
    ctrl = controls.build(state, "compare", speculation_switch=False)

    def announce(request: gr.Request):
        state.stop_event(session_key(request))  # armed now: a Stop before the runs start still counts
        note = panel.status_html(WAITING, "wait") if state.busy else panel.status_html("Starting…", "info")
        return note, ""

    def compare_ui(request: gr.Request, text: str, history: list, *values):
        keep = (gr.update(),) * 4
        if not text or not text.strip():
            yield *keep[:2], gr.update(), panel.status_html("Type a prompt first.", "info"), history, gr.update()
            return
        try:
            resolved = S.resolve(ctrl.to_dict(values), S.defaults(state.defaults))
        except S.SettingsError as exc:
            yield *keep[:3], panel.status_html(str(exc), "error"), history, gr.update()
            return
        greedy = resolved["temperature"] <= 0
        stop_ev = state.armed_stop_event(session_key(request))
        payload, plain, spec = None, None, None
        try:
            for st, plain, spec, order in api.compare_stream(state, text, resolved, stop_ev, len(history)):
                if st == "waiting":
                    yield *keep[:3], panel.status_html(WAITING, "wait"), history, gr.update()
                    continue
                payload = api.compare_payload(plain, spec, resolved, order, text, st)
                note = panel.status_html(f"Running ({order})…", "info") if st != "done" else ""
                yield (panel.compare_side_html("Speculation off (plain)", plain, greedy),
                       panel.compare_side_html("Speculation on", spec, greedy), gr.update(), note, history,
                       gr.update())
        except Exception as exc:
            yield *keep[:3], panel.status_html(describe_error(exc), "error"), history, gr.update()
            return
        if payload is None:
            return
        if payload["error"]:
            yield gr.update(), gr.update(), "", panel.status_html(payload["error"], "error"), history, gr.update()
            return
        if payload["identical"] is None:  # stopped before both finished
            yield gr.update(), gr.update(), "", panel.status_html("Stopped: no result recorded.", "info"), \
                history, gr.update()
            return
        history = (history + [payload])[-20:]
        yield (gr.update(), gr.update(), panel.compare_row_html(_row(payload, greedy)), "", history,
               panel.history_html(history))

    def do_stop(request: gr.Request):
        stopped = state.request_stop(session_key(request))
        return panel.status_html("Stopping…" if stopped else "Nothing is running.", "info")

    outputs = [plain_view, spec_view, result, status, runs, hist_view]
    for trigger in (run.click, prompt.submit):
        trigger(announce, None, [status, result], queue=False, api_visibility="private").then(
            compare_ui, [prompt, runs, *ctrl.components], outputs, api_visibility="private", show_progress="hidden",
            **GEN)
    stop.click(do_stop, None, [status], queue=False, api_visibility="private")
    return ctrl


def _row(payload: dict, greedy: bool) -> dict:
    row = dict(payload)
    if not greedy:
        row["identical"] = None  # sampled runs are not expected to match: no badge either way
    return row


def _side(title: str) -> str:
    return (f'<div class="tdm-side"><div class="tdm-side-head"><b>{panel.esc(title)}</b></div>'
            f'{panel.tokens_html([], empty="Run a comparison to see this side stream.")}</div>')
