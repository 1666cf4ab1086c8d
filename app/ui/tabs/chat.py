"""Chat tab: multi-turn streaming chat whose replies render as Markdown with each token's provenance coloured
in place, a line of counts under each reply, and the live panel (counters, honest speedup, per-position
acceptance, what the numbers mean) beside it. Messages sent while a reply streams wait in a visible queue, and
a message waiting for another generation says which (``AppState.holder``). Completion mode continues the text as
it is, for base models (``chatmode``); the reply streaming now is kept in the browser as it streams, so a reload
mid-reply shows it marked interrupted, and Continue carries it on.

``layout`` places the components, ``wire`` connects their events to the module-level handlers below it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import gradio as gr

from app.engine.events import KINDS, StopReason
from app.errors import ui_message
from app.service import chat, settings as S
from app.service.chat import ChatMode
from app.service.chatqueue import Notes, Sessions
from app.service.runner import RunStatus
from app.service.state import AppState, session_key
from app.ui import controls, keep, panel, reply
from app.ui.controls import GEN
from app.ui.tabs import chatfaster, chatmode
from app.ui.tabs.chatview import (display, do_measure, idle_counters, line_for, plain_messages, reply_counters,
                                  waiting, waits_for)

WAITING = "Waiting for another generation to finish (in another tab, the API or a benchmark); yours starts next."
QUEUED = "Queued: your message is sent when the current reply finishes."
SAVE_EVERY_S = 1.0  # a streaming reply is kept in the browser this often (what a reload mid-reply keeps)
REPLY = dict(concurrency_id="chat-reply", concurrency_limit=8)  # a waiting reply says what it waits for
STOP_WAIT_S = 4.0  # Stop waits this long for the reply to end, then says "Stopping…"


@dataclass
class ChatView:
    """What the app refreshes on page load and after "Use this": the tab's own controls, the counters, the
    conversation kept in the browser."""
    ctrl: controls.Controls  # the tab's own controls, then the shared ones (Pair settings)
    local: controls.Controls
    counters: Any
    settings_line: Any
    goto: Any
    conversation: Any
    saved: Any  # gr.BrowserState
    sessions: Sessions
    state: AppState
    mode: Any
    kind: Any

    @property
    def components(self) -> list:
        return [*self.local.components, self.counters]

    def refresh(self, state: AppState) -> list:
        return [*self.local.refresh(state), idle_counters(state)]

    def tuned(self, state: AppState) -> list:
        return [*self.local.tuned(state), gr.update()]

    def follow(self, loaded: Any) -> None:
        """After ``loaded`` (a pair was loaded): the mode and the base-model notice follow the new target."""
        loaded.then(lambda: chatmode.view(self.state), None, [self.mode, self.kind], api_visibility="private",
                    queue=False, show_progress="hidden")


def build(state: AppState, gen: controls.Controls, view: SimpleNamespace | None = None) -> ChatView:
    """Wire the tab (laid out by ``layout``, or here) to the shared settings ``gen`` (Pair settings)."""
    view = view or layout(state)
    ctrl = view.local + gen
    sessions = Sessions()  # per browser session: the conversation and its queue
    wire(state, view, ctrl, sessions, Notes())
    return ChatView(ctrl, view.local, view.counters, view.settings_line, view.goto, view.conversation, view.saved,
                    sessions, state, view.mode, view.kind)


def layout(state: AppState) -> SimpleNamespace:
    """Place the components; returned by name for ``wire``."""
    last = gr.State({})  # the latest reply: summary, speculative, messages, resolved, at, plain
    saved = gr.BrowserState([], storage_key=keep.STORAGE_KEY, secret=keep.secret())
    with gr.Row(equal_height=False):
        with gr.Column(scale=5):
            mode, kind = chatmode.layout(state)
            conversation = gr.HTML(display([]), elem_id="tdm-chatbot")
            with gr.Row():
                box = gr.Textbox(placeholder="Message · Enter sends, Shift+Enter adds a line", lines=1,
                                 max_lines=8, show_label=False, scale=6, elem_id="tdm-chat-input")
                send = gr.Button("Send", variant="primary", scale=1, min_width=64, elem_id="tdm-send")
            with gr.Row():
                stop = gr.Button("Stop", variant="stop", size="sm", min_width=80, elem_id="tdm-stop")
                regen = gr.Button("Regenerate", size="sm", min_width=100, elem_id="tdm-regen")
                cont = gr.Button("Continue", size="sm", min_width=90, elem_id="tdm-continue")
                clear = gr.Button("New chat", size="sm", min_width=90, elem_id="tdm-clear")
                colour = gr.Checkbox(True, label="Colour tokens", elem_id="tdm-colour", min_width=120)
            status = gr.HTML("", elem_id="tdm-chat-status")
        with gr.Column(scale=4):
            gr.HTML(panel.legend_html(KINDS), elem_id="tdm-legend")
            counters = gr.HTML(idle_counters(state), elem_id="tdm-counters")
            with gr.Row():
                measure = gr.Button("Measure plain speed", size="sm", elem_id="tdm-measure")
                faster = gr.Button("Make it faster", size="sm", variant="secondary", elem_id="tdm-faster")
            faster_view = chatfaster.layout()
            note = gr.HTML("", elem_id="tdm-measure-note")
            with gr.Accordion("What these numbers mean", open=False, elem_id="tdm-glossary"):
                gr.HTML(panel.glossary_html())
            local = controls.build_local(state, "chat")
            with gr.Row(equal_height=True):
                settings_line = gr.HTML("", elem_id="tdm-chat-settings")
                goto = gr.Button("Change in Pair settings", size="sm", scale=0, min_width=120,
                                 elem_id="tdm-chat-goto")
    return SimpleNamespace(**locals())


def wire(state: AppState, v: SimpleNamespace, ctrl: controls.Controls, sessions: Sessions, notes: Notes) -> None:
    """Connect the events to the handlers below; the closures only hand over the state and keep Gradio's
    signatures (gr.Request and gr.Progress are injected by parameter)."""

    def on_push(request: gr.Request, message: str, mode: str, *values):
        return push_user(state, sessions, request, message, (mode, values))

    def on_regen(request: gr.Request, *values):
        return regenerate(state, sessions, notes, request, *values)

    def on_continue(request: gr.Request, *values):
        return chatmode.carry_on(state, sessions, request, values, display)

    def on_respond(request: gr.Request):
        key, saved_at = session_key(request), 0.0
        for out in respond(state, sessions, notes, ctrl, request):
            notes.said(key, out[2])
            live = sessions.live(key)  # the question and the reply so far: kept in the browser as it streams
            if live and time.monotonic() - saved_at >= SAVE_EVERY_S:
                saved_at = time.monotonic()
                yield (*out, keep.saved(sessions.history(key) + live))
            else:
                yield (*out, gr.update())

    def on_stop(request: gr.Request):
        return do_stop(state, sessions, notes, request)

    def on_clear(request: gr.Request):
        return do_clear(state, sessions, notes, request)

    def on_measure(request: gr.Request, last_run: dict):
        return do_measure(state, sessions, request, last_run)

    def on_save(request: gr.Request):
        return keep.saved(sessions.history(session_key(request)))

    private: dict[str, Any] = dict(api_visibility="private")
    save: dict[str, Any] = dict(fn=on_save, inputs=None, outputs=[v.saved], queue=False, show_progress="hidden",
                                **private)
    reply_loop = dict(fn=on_respond, inputs=None, outputs=[v.conversation, v.counters, v.status, v.last, v.box,
                                                           v.saved],
                      show_progress="hidden", trigger_mode="multiple", **private, **REPLY)
    for trigger in (v.send.click, v.box.submit):
        trigger(on_push, [v.box, v.mode, *ctrl.components], [v.box, v.conversation, v.status], queue=False,
                **private).then(**reply_loop).then(**save)
    for button, handler in ((v.regen, on_regen), (v.cont, on_continue)):
        button.click(handler, ctrl.components, [v.conversation, v.status], queue=False, **private) \
            .then(**reply_loop).then(**save)
    v.stop.click(on_stop, None, [v.status], queue=False, **private)
    v.clear.click(on_clear, None, [v.conversation, v.counters, v.status, v.last, v.note], queue=False, **private) \
        .then(**save)
    memory = v.local.components[v.local.names.index("lookup_memory")]
    v.clear.click(lambda: False, None, [memory], queue=False, **private)  # a new conversation starts clean
    # the class goes on <body>; the style sheet's rule for it wins over the tints (see style.py)
    v.colour.change(None, [v.colour], None, js="(on) => { document.body.classList.toggle('tdm-nocolour', !on); }")
    v.measure.click(on_measure, [v.last], [v.conversation, v.counters, v.note, v.last], show_progress="minimal",
                    show_progress_on=[v.note], **private, **GEN).then(**save)
    chatfaster.wire(state, v.faster, v.faster_view, v.note, ctrl)
    gr.on(None, lambda: chatmode.view(state), None, [v.mode, v.kind], queue=False, show_progress="hidden",
          **private)  # on page load: the loaded target's mode and notice


def restore(state: AppState, sessions: Sessions, request: gr.Request, data: Any) -> str:
    """On page load: the conversation the browser kept (a reload, or the app restarted), unless this session
    already has one."""
    key = session_key(request)
    if not sessions.history(key) and not sessions.active(key):
        sessions.set_history(key, keep.restored(data))
    return display(sessions.history(key), queued=sessions.queued(key))


def on_page_load(state: AppState, sessions: Sessions, request: gr.Request, data: Any) -> tuple[str, str]:
    """The counters and the conversation a loaded page shows (see ``restore``)."""
    conversation = restore(state, sessions, request, data)
    replied = any(m["role"] == "assistant" for m in sessions.history(session_key(request)))
    return idle_counters(state, restored=replied), conversation


# --- the handlers (the conversation lives in ``sessions``: messages {"role", "content"}, replies also "html"
# and "line"; content unescaped) ----------------------------------------------------------------------


def push_user(state: AppState, sessions: Sessions, request: gr.Request, message: str, how: tuple):
    """Queue ``message``; ``how``: (mode, the settings' values)."""
    if not message or not message.strip():
        return gr.update(), gr.update(), panel.status_html("Type a message first.", "info")
    key = session_key(request)
    mode, values = how
    if sessions.push(key, message, (chatmode.mode_of(mode), values, None)):
        return "", gr.update(), panel.status_html(QUEUED, "wait")
    state.stop_event(key)  # armed now: a Stop before the reply starts still counts
    busy = state.busy
    note_ = waiting(state) if busy else panel.status_html("Starting…", "info")
    return "", display(sessions.history(key), queued=sessions.queued(key), waits=waits_for(state) * busy), note_


def regenerate(state: AppState, sessions: Sessions, notes: Notes, request: gr.Request, *values):
    key = session_key(request)
    if sessions.active(key):
        return gr.update(), panel.status_html("Wait for the reply to finish (or Stop it) first.", "info")
    hist = sessions.history(key)
    notes.replaced.pop(key, None)
    if hist and hist[-1]["role"] == "assistant":
        if not hist[-1].get("interrupted"):  # (a reply cut short is no reply to come back "the same")
            notes.replaced[key] = hist[-1]["content"]
        hist = hist[:-1]
    if not hist or hist[-1]["role"] != "user":
        return display(hist), panel.status_html("Nothing to regenerate yet.", "info")
    state.stop_event(key)
    sessions.set_history(key, hist[:-1])
    sessions.push(key, hist[-1]["content"], (chatmode.mode_of(hist[-1].get("mode")), values, None), front=True)
    return display(hist[:-1], queued=sessions.queued(key)), ""


def respond(state: AppState, sessions: Sessions, notes: Notes, ctrl: controls.Controls, request: gr.Request):
    """The session's reply loop: answers queued messages in order; outputs conversation, counters,
    status, last reply, input box."""
    key = session_key(request)
    claim = sessions.claim(key)
    if claim is None:  # a loop runs already (it takes the new message next) or nothing is queued
        yield (gr.update(),) * 5
        return
    try:
        while (item := sessions.next(claim)) is not None:
            outcome = yield from answer(state, sessions, ctrl, claim, sessions.history(key), item,
                                        notes.replaced.pop(key, None))
            if outcome is None:  # cleared meanwhile: drop this reply, carry on from the empty conversation
                continue
            stopped, last_run, failed = outcome
            if stopped:  # Stop or an error: what is still queued goes back into the input box
                queued = sessions.give_back(claim)
                if queued:
                    note = gr.update() if failed else panel.status_html(
                        "Stopped. Your queued message is back in the box.", "ok")
                    yield gr.update(), gr.update(), note, last_run, "\n\n".join([failed] * bool(failed) + queued)
                return
    finally:
        sessions.release(claim)


def answer(state: AppState, sessions: Sessions, ctrl: controls.Controls, claim, hist: list, item: tuple,
           replaced: str | None = None):
    """Stream one reply (a sub-generator of ``respond``); returns (stopped, last reply, the text of a turn
    that failed), or None when Clear was pressed meanwhile. A failed turn is dropped, its text given back.
    ``item``: (text, (mode, values, the reply a Continue carries on or None)); ``replaced``: the reply a
    Regenerate replaces."""
    text, (mode, values, start) = item
    key, keep_ = claim.key, gr.update()

    def fail(message: str):  # (a Continue keeps its question and the reply so far)
        kept = hist + ([question, start] if start else [])
        sessions.set_history(key, kept)
        return display(kept), keep_, panel.status_html(message, "error"), keep_, "" if start else text

    question = {"role": "user", "content": text, **({"mode": mode} if mode == ChatMode.COMPLETION else {})}
    asked = hist + [question]
    before = list(start["tokens"]) if start else []  # a Continue: the reply so far, kept as it was
    so_far = "".join(t["t"] for t in before)
    sessions.set_live(key, [question, {"role": "assistant", "content": so_far, "tokens": before, "interrupted": True}])
    wrong = controls.problem(ctrl.to_dict(values))
    if wrong:  # out of range: refused with the range named, never changed
        yield fail(f"{wrong} Change it in Pair settings; your message is back in the box.")
        return True, {}, text
    try:
        resolved = S.resolve(ctrl.to_dict(values), S.defaults(state.defaults))
    except S.SettingsError as exc:
        yield fail(str(exc))
        return True, {}, text
    messages = chat.build_messages(plain_messages(hist), text, resolved["system"])
    stop = state.armed_stop_event(key)
    snapshots = chat.completion_stream(state, text + so_far, resolved, stop, who="a reply in another Chat tab") \
        if mode == ChatMode.COMPLETION else \
        chat.chat_stream(state, messages, resolved, stop, who="a reply in another Chat tab", reply_start=so_far)
    spec, live, shown_at, cost = resolved["speculative"], None, 0.0, 0.0
    try:
        for status, live in snapshots:
            if sessions.stale(claim):
                return None
            if status == RunStatus.WAITING:
                if time.perf_counter() - shown_at >= 0.5:  # what it waits for, and its progress
                    shown_at = time.perf_counter()
                    yield (display(hist + [dict(question, waits=waits_for(state))]), keep_, waiting(state), keep_,
                           keep_)
                continue
            if live.error or (status != RunStatus.DONE and time.perf_counter() - shown_at < max(0.1, 6 * cost)):
                continue  # big replies render less often, so rendering never competes with decoding
            t0 = time.perf_counter()
            queued = sessions.queued(key)
            toks = before + reply.compact(live.tokens, live.draft_texts, live.drafter)
            streaming = {"role": "assistant", "tokens": toks, "streaming": status != RunStatus.DONE}
            sessions.set_live(key, [question, {"role": "assistant", "content": so_far + live.text, "tokens": toks,
                                               "interrupted": True}])
            view = display(asked, streaming, queued)
            snapshot = {"summary": live.summary(), "speculative": spec, "resolved": resolved, "tree": live.tree}
            shown_at, cost = time.perf_counter(), time.perf_counter() - t0
            waiting_ = f" · {len(queued)} message{'s' * (len(queued) > 1)} queued" if queued else ""
            yield (view, reply_counters(state, snapshot)[0],
                   panel.status_html(f"Generating… (Stop ends it within one step){waiting_}", "info"), keep_, keep_)
    except Exception as exc:  # never let a bad input take the tab down
        yield fail(ui_message(exc))
        return True, {}, text
    if live is None or sessions.stale(claim):
        return None
    if live.error:  # e.g. the prompt is past the context
        yield fail(live.error)
        return True, {}, text
    last_run = {"summary": live.summary(), "speculative": spec, "resolved": resolved, "at": time.time(),
                "tree": live.tree,
                "messages": messages if mode == ChatMode.CHAT and not start else None, "plain": None}
    counters_view, claim_ = reply_counters(state, last_run)
    toks = before + reply.compact(live.tokens, live.draft_texts, live.drafter)
    line = line_for(last_run, claim_) + (f" · continued after {len(before)} tokens" if start else "")
    hist = asked + [{"role": "assistant", "content": so_far + live.text, "html": reply.render(toks), "tokens": toks,
                     "line": line}]
    sessions.set_history(key, hist)
    reason = live.done.reason if live.done else StopReason.STOPPED
    said = f"{panel.reason_text(reason).capitalize()} · {len(live.tokens)} tokens"
    same = replaced is not None and (live.text.startswith(replaced) or replaced.startswith(live.text))
    if same and resolved["temperature"] == 0:  # (up to the reply length: max tokens may have changed)
        said += (" · T = 0 is deterministic: the same reply. Raise the temperature (Pair settings) for a "
                 "different one.")
    done = panel.status_html(said, "ok")
    yield display(hist, queued=sessions.queued(key)), counters_view, done, last_run, keep_
    return reason == StopReason.STOPPED, last_run, None


def do_stop(state: AppState, sessions: Sessions, notes: Notes, request: gr.Request):
    """Stop the session's reply and answer with the status its loop ends on ("Stopped · N tokens"): the loop
    sends the same one, so whichever reaches the page last, the page says how it ended. "Stopping…" only while
    the reply has not ended within ``STOP_WAIT_S`` (e.g. a long prompt still being read)."""
    key = session_key(request)
    if not sessions.active(key):
        state.request_stop(key)  # a Send whose loop has not started yet
        return panel.status_html("Nothing is running.", "info")
    state.request_stop(key)
    deadline = time.monotonic() + STOP_WAIT_S
    while sessions.active(key) and time.monotonic() < deadline:
        time.sleep(0.02)
    if sessions.active(key):
        return panel.status_html("Stopping… (the reply ends at its next step)", "info")
    return notes.status.get(key) or gr.update()


def do_clear(state: AppState, sessions: Sessions, notes: Notes, request: gr.Request):
    key = session_key(request)
    notes.replaced.pop(key, None)
    sessions.clear(key)
    state.request_stop(key)
    return display([]), idle_counters(state), "", {}, ""
