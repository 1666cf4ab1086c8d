"""The Chat tab's two modes and Continue. Chat sends the conversation through the target's chat template;
Completion continues the text box's text as it is, which is what a base (completion) model can do, so it is the
default where the loaded target is one, with a notice saying why (``chat.base_model``). Continue carries the
last reply on from where it ended (a reload, Stop or max tokens cut it)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import gradio as gr

from app.service.chat import ChatMode, base_model
from app.service.chatqueue import Sessions
from app.service.state import AppState, session_key
from app.ui import panel

CHOICES = [("Chat (chat template)", ChatMode.CHAT.value), ("Completion (continue the text)", ChatMode.COMPLETION.value)]


def mode_of(value: Any) -> ChatMode:
    """The mode a control or a stored message names; Chat for anything else."""
    return ChatMode.COMPLETION if value == ChatMode.COMPLETION else ChatMode.CHAT


def _notice(why: Optional[str]) -> str:
    return panel.status_html(why, "wait") if why else ""


def layout(state: AppState) -> tuple[Any, Any]:
    """The mode switch and the base-model notice, set for the loaded target."""
    why = base_model(state)
    mode = gr.Radio(CHOICES, value=(ChatMode.COMPLETION if why else ChatMode.CHAT).value, label="Mode",
                    elem_id="tdm-chat-mode",
                    info="Completion continues your text as raw text, without the chat template (for base models).")
    kind = gr.HTML(_notice(why), visible=bool(why), elem_id="tdm-chat-kind")  # (no empty gap for others)
    return mode, kind


def view(state: AppState) -> tuple[Any, Any]:
    """After a load (of the page or of a pair): Completion for a base model, with the notice; else Chat."""
    why = base_model(state)
    return (gr.update(value=(ChatMode.COMPLETION if why else ChatMode.CHAT).value),
            gr.update(value=_notice(why), visible=bool(why)))


def carry_on(state: AppState, sessions: Sessions, request: Any, values: tuple,
             display: Callable[[list], str]) -> tuple[Any, str]:
    """Continue: the last reply is taken back off the conversation and queued to be carried on, its tokens kept."""
    key = session_key(request)
    if sessions.active(key):
        return gr.update(), panel.status_html("Wait for the reply to finish (or Stop it) first.", "info")
    hist = sessions.history(key)
    if len(hist) < 2 or hist[-1]["role"] != "assistant" or hist[-2]["role"] != "user":
        return display(hist), panel.status_html("Nothing to continue yet: Continue carries the last reply on.", "info")
    question, partial = hist[-2], hist[-1]
    tokens = partial.get("tokens") or ([{"t": partial["content"], "k": "plain", "s": 0, "p": None, "q": None}]
                                       if partial["content"] else [])
    state.stop_event(key)  # armed now: a Stop before the reply starts still counts
    sessions.set_history(key, hist[:-2])
    sessions.push(key, question["content"], (mode_of(question.get("mode")), values, dict(partial, tokens=tokens)),
                  front=True)
    return display(hist), panel.status_html("Continuing the last reply…", "info")
