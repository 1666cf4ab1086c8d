""""Make it faster" in the Chat tab: the button first says what the quick sweep will do and about how long it
takes (an estimate from measured figures), then Start runs it with its progress and a Stop, or Cancel puts the
plan away."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import gradio as gr

from app.errors import ui_message
from app.service.faster import faster_plan, make_faster
from app.service.state import AppState, session_key
from app.ui import controls, panel
from app.ui.controls import GEN


def layout() -> SimpleNamespace:
    """The plan's text and its buttons, hidden until "Make it faster" is pressed."""
    plan = gr.HTML("", elem_id="tdm-faster-plan")
    with gr.Row():
        start = gr.Button("Start the sweep", size="sm", variant="primary", visible=False, elem_id="tdm-faster-start")
        cancel = gr.Button("Cancel", size="sm", visible=False, elem_id="tdm-faster-cancel")
        stop = gr.Button("Stop the sweep", size="sm", variant="stop", visible=False, elem_id="tdm-faster-stop")
    return SimpleNamespace(plan=plan, start=start, cancel=cancel, stop=stop)


def wire(state: AppState, faster: Any, f: SimpleNamespace, note: Any, ctrl: controls.Controls) -> None:
    switches: dict[str, threading.Event] = {}  # per session: the running sweep's stop switch
    private: dict[str, Any] = dict(api_visibility="private", queue=False)
    hidden, shown = gr.update(visible=False), gr.update(visible=True)

    def on_plan():
        try:
            text = panel.status_html(faster_plan(state), "info")
        except Exception as exc:
            return panel.status_html(f"Cannot plan a sweep: {ui_message(exc)}", "error"), hidden, shown
        return text, shown, shown

    def on_start(request: gr.Request):
        switches[session_key(request)] = threading.Event()
        return hidden, hidden, shown

    def on_run(request: gr.Request, progress=gr.Progress()):
        return do_faster(state, ctrl, progress, switches.get(session_key(request)))

    def on_stop(request: gr.Request):
        ev = switches.get(session_key(request))
        if ev is not None:
            ev.set()
        return panel.status_html("Stopping the sweep after the run in progress…", "wait")

    faster.click(on_plan, None, [f.plan, f.start, f.cancel], **private)
    f.cancel.click(lambda: ("", hidden, hidden), None, [f.plan, f.start, f.cancel], **private)
    f.start.click(on_start, None, [f.start, f.cancel, f.stop], **private) \
        .then(on_run, None, [note, *ctrl.components], show_progress_on=[note], api_visibility="private", **GEN) \
        .then(lambda: ("", hidden), None, [f.plan, f.stop], **private)
    f.stop.click(on_stop, None, [f.plan], **private)


def do_faster(state: AppState, ctrl: controls.Controls, progress: gr.Progress, cancel: threading.Event | None):
    try:
        message, settings = make_faster(state, lambda x, d: progress(x, desc=d), cancel=cancel)
    except Exception as exc:
        return (panel.status_html(f"Could not make it faster: {ui_message(exc)}", "error"),
                *[gr.update()] * len(ctrl.components))
    return panel.status_html(message, "ok"), *ctrl.apply(settings)

