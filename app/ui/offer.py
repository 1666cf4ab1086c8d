"""The stand-in offer above the tabs (``service/firstrun.py``): where the loaded pair cannot pay on this machine,
why in a few sentences and a button that derives and loads the stand-in pair; once it is loaded (picked at start
or accepted), what was done and why, with a button back to the pair it replaced. Hidden otherwise. The buttons
are the ``/use_standin`` and ``/standin_back`` endpoints (gradio_client)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from app.service import firstrun
from app.service.firstrun import Action
from app.ui import panel
from app.ui.api import disk_words, refused


def layout() -> SimpleNamespace:
    with gr.Column(visible=False, elem_id="tdm-offer") as box:
        text = gr.HTML("")
        with gr.Row():
            use_btn = gr.Button("Use the stand-in pair", variant="primary", elem_id="tdm-offer-use", scale=0,
                                min_width=400)  # the pair's name on one line
            back_btn = gr.Button("Back to the demo pair", elem_id="tdm-offer-back", scale=0, min_width=240,
                                 visible=False)
            keep_btn = gr.Button("Keep the loaded pair", elem_id="tdm-offer-keep", scale=0, min_width=240)
    return SimpleNamespace(box=box, text=text, use_btn=use_btn, back_btn=back_btn, keep_btn=keep_btn)


def current(state) -> Any:
    """The decision to show: an offer for the pair it was made for, or the stand-in pair it loaded (a pair loaded
    since in Pair settings makes it moot)."""
    d = state.offer
    if d is None:
        return None
    if d.action == Action.SWITCHED:
        return d if state.pair_id == d.pair_id else None
    return d if state.pair_id == d.from_pair else None


def html(state) -> str:
    d = current(state)
    if d is None:
        return ""
    if d.action == Action.SWITCHED:
        title = f"Speculation can pay here with a stand-in target: {d.pair_id} is loaded"
        body = f"{d.why} Replies are the small model's text; the speedup is what a model of this size would get."
    else:
        title = "Speculation cannot pay with the loaded pair on this machine — a stand-in target can"
        body = d.why
    return (f'<div class="tdm-status tdm-status-info" role="status"><strong>{panel.esc(title)}</strong>'
            f'<p style="margin:4px 0 0">{panel.esc(body)}</p></div>')


def view(state) -> tuple:
    """(box, text, use, back, keep) updates for the state's decision."""
    d = current(state)
    switched = d is not None and d.action == Action.SWITCHED
    use_label = "Use the stand-in pair" if d is None or d.candidate is None else \
        f"Use {d.pair_id}{'' if d.candidate.installed else ' (derived once)'}"
    back_label = f"Back to {d.from_pair}" if d is not None and d.from_pair else "Back to the demo pair"
    return (gr.update(visible=d is not None), html(state), gr.update(value=use_label, visible=not switched),
            gr.update(value=back_label, visible=switched), gr.update(visible=not switched))


def use(state, progress: Any) -> tuple:
    try:
        with disk_words():
            firstrun.accept(state, lambda f, what: progress(f, desc=what))
    except firstrun.NoOffer as exc:
        raise refused(str(exc)) from None
    return view(state)


def go_back(state, progress: Any) -> tuple:
    try:
        firstrun.back(state, lambda f, what: progress(f, desc=what))
    except firstrun.NoOffer as exc:
        raise refused(str(exc)) from None
    return view(state)


def keep(state) -> tuple:
    state.offer = None
    return view(state)


def wire(demo: gr.Blocks, state, v: SimpleNamespace) -> list:
    """Show the decision on every page load; returns the events after which the loaded pair changed (the
    caller refreshes what names the pair)."""
    outputs = [v.box, v.text, v.use_btn, v.back_btn, v.keep_btn]

    def on_use(progress=gr.Progress()) -> tuple:
        return use(state, progress)

    def on_back(progress=gr.Progress()) -> tuple:
        return go_back(state, progress)

    demo.load(lambda: view(state), None, outputs, api_visibility="private", queue=False, show_progress="hidden")
    used = v.use_btn.click(on_use, None, outputs, api_name="use_standin", show_progress_on=[v.text])
    went = v.back_btn.click(on_back, None, outputs, api_name="standin_back", show_progress_on=[v.text])
    v.keep_btn.click(lambda: keep(state), None, outputs, api_visibility="private", queue=False)
    return [used, went]
