"""The UI's ``/chat`` and ``/compare`` endpoints (for gradio_client): the service's chat and compare streams,
their errors raised as ``gr.Error``."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

import gradio as gr

from app.errors import disk_full, disk_full_line
from app.service import settings as S
from app.service.chat import (build_messages, chat_payload, chat_stream, compare_payload, compare_stream,
                              normalize_history, user_text)
from app.service.state import AppState


def refused(message: str) -> gr.Error:
    """The error a request gets for bad input: shown to the user, and one line on the console (not Gradio's
    traceback: the input was wrong, not the app)."""
    print(f"[tandem] refused: {message}", file=sys.stderr, flush=True)
    return gr.Error(message, print_exception=False)


@contextmanager
def disk_words() -> Iterator[None]:
    """A full disk while a handler writes (the Pair lab's database, a store) is shown in the command line's
    words with one console line, not as sqlite's or the OS's raw text with a traceback; other errors go on."""
    try:
        yield
    except Exception as exc:
        if not disk_full(exc):
            raise
        raise refused(disk_full_line(exc)) from None


# --- the endpoints ---------------------------------------------------------------------------------------

def api_chat(state: AppState, message: str, history: Any, settings: Any, session: str) -> Iterator[dict]:
    try:
        resolved = S.resolve(settings, S.defaults(state.defaults))
        messages = build_messages(normalize_history(history), user_text(message), resolved["system"])
    except S.SettingsError as exc:
        raise refused(str(exc)) from None
    live = None
    for status, live in chat_stream(state, messages, resolved, state.stop_event(session)):
        if live.error:
            raise refused(live.error)
        yield chat_payload(live, status)


def api_compare(state: AppState, prompt: str, settings: Any, session: str, history: list) -> Iterator[dict]:
    try:
        resolved = S.resolve(settings, S.defaults(state.defaults))
        prompt = user_text(prompt, "prompt")
    except S.SettingsError as exc:
        raise refused(str(exc)) from None
    payload = None
    for status, plain, spec, order in compare_stream(state, prompt, resolved,
                                                     state.stop_event(session), len(history)):
        if plain.error or spec.error:
            raise refused(plain.error or spec.error)
        payload = compare_payload(plain, spec, resolved, order, prompt, status)
        yield payload
    if payload is not None and payload["identical"] is not None:
        history.append(payload)
