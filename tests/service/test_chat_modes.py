"""Chat's completion mode and what a waiting request is told, on the real demo models: a target without a chat
template is named a base (completion) model, a text is continued with no template around it, and the
generation lock's holder is named with its progress."""

from __future__ import annotations

import threading

import pytest

from app.service import chat, settings as S
from app.service.runner import RunStatus
from app.service.state import Activity, AppState
from app.testing import load_options


@pytest.fixture(scope="module")
def gemma_state(gemma_paths):
    state = AppState()
    state.load(gemma_paths[0], gemma_paths[1], load_options(n_ctx=1024), pair_id="demo-gemma3")
    yield state
    state.unload()


def test_a_target_without_a_chat_template_is_named_a_base_model(gemma_state, smol_pair):
    why = chat.base_model(gemma_state)
    assert why and "base (completion) model" in why and "gemma-3-270m.F32.gguf" in why
    assert "no chat template" in why and "names no chat or instruction tuning" in why
    assert chat.base_model(AppState(pair=smol_pair)) is None  # an instruct model with its template
    assert chat.base_model(AppState()) is None  # nothing loaded


def test_completion_mode_continues_the_text_with_no_template(gemma_state):
    resolved = S.resolve({"temperature": 0, "max_tokens": 12}, S.defaults({}))
    text = "The capital of France is"
    live = None
    for status, live in chat.completion_stream(gemma_state, text, resolved, threading.Event()):
        pass
    assert live is not None and live.error is None and live.tokens
    pair = gemma_state.pair
    prompt = pair.completion_prompt(text, special=False)
    assert len(prompt) < len(pair.chat_prompt([{"role": "user", "content": text}]))  # no "User: … Assistant:"
    assert not live.text.lstrip().startswith(("Assistant:", "User:"))
    assert gemma_state.activity is None  # the reply's mark is gone with it


def test_a_waiting_request_is_told_what_holds_the_pair_and_its_progress():
    state = AppState()
    assert "API client" in state.holder()  # nothing named: the kinds it may be
    with state.generation_lock, state.doing(Activity("Make it faster's quick sweep", total=48)) as act:
        assert state.holder() == "Make it faster's quick sweep (run 0 of 48)"
        act.done, act.eta_s = 3, 40.2
        assert state.holder() == "Make it faster's quick sweep (run 3 of 48, about 40 s left)"
    assert state.activity is None and "API client" in state.holder()


def test_the_chat_mark_names_the_reply_while_it_holds_the_pair(gemma_state):
    resolved = S.resolve({"temperature": 0, "max_tokens": 4}, S.defaults({}))
    seen = set()
    for status, _ in chat.chat_stream(gemma_state, [{"role": "user", "content": "Hi"}], resolved,
                                      threading.Event(), who="a reply in another Chat tab"):
        if status == RunStatus.RUNNING and gemma_state.busy:
            seen.add(gemma_state.holder())
    assert seen == {"a reply in another Chat tab"}
    assert gemma_state.activity is None


def test_a_compare_run_is_named_while_it_holds_the_pair(gemma_state):
    resolved = S.resolve({"temperature": 0, "max_tokens": 4}, S.defaults({}))
    seen = set()
    for status, *_ in chat.compare_stream(gemma_state, "Hi", resolved, threading.Event(), 0):
        if status == RunStatus.RUNNING and gemma_state.busy:
            seen.add(gemma_state.holder())
    assert seen == {"a Compare run"} and gemma_state.activity is None


def test_a_pair_load_is_named_while_it_holds_the_pair(smol_paths):
    state, seen = AppState(), []
    state.load(smol_paths[0], None, load_options(n_ctx=512),
               progress=lambda f, d: seen.append(state.holder()) if state.busy else None)
    try:
        assert f"loading the pair {smol_paths[0].name}" in seen
        assert state.activity is None  # gone with the load
    finally:
        state.unload()
