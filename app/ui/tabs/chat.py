"""Chat tab: multi-turn streaming chat whose replies render as Markdown with each token's provenance coloured
in place, a line of counts under each reply, and the live panel (counters, honest speedup, per-position
acceptance, what the numbers mean) beside it. Messages sent while a reply streams wait in a visible queue.

``layout`` places the components, ``wire`` connects their events to the module-level handlers below it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Sequence

import gradio as gr

from app.engine.events import KINDS, StopReason
from app.errors import ui_message
from app.service import chat, settings as S, speedup
from app.service.baseline import measure_baseline, measure_plain
from app.service.chatqueue import Notes, Sessions
from app.service.faster import make_faster
from app.service.runner import RunStatus
from app.service.state import AppState, session_key
from app.ui import controls, keep, panel, reply
from app.ui.controls import GEN

WAITING = "Waiting for another generation to finish (in another tab, the API or a benchmark); yours starts next."
EMPTY = "Ask something. Each reply is coloured by where its tokens came from; click a red one to see what " \
        "the draft had proposed."
QUEUED = "Queued: your message is sent when the current reply finishes."
STOP_WAIT_S = 4.0  # Stop waits this long for the reply to end, then says "Stopping…"


def display(history: list[dict], live: dict | None = None, queued: Sequence[str] = ()) -> str:
    """The conversation as HTML: stored messages, the reply streaming now, then the queued messages."""
    msgs = list(history) + ([live] if live else []) + [{"role": "user", "content": t, "queued": True}
                                                        for t in queued]
    return reply.conversation_html(msgs, empty=EMPTY)


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
    return panel.counters_html(summary, spec, claim, notes), claim


def line_for(last: dict, claim: dict | None) -> str:
    saved = speedup.seconds_saved(last["summary"], claim)
    r = last["resolved"]
    return panel.reply_line(last["summary"], last["speculative"], r["proposer"], r["k"], saved,
                            claim["kind"] if claim else None)


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

    @property
    def components(self) -> list:
        return [*self.local.components, self.counters]

    def refresh(self, state: AppState) -> list:
        return [*self.local.refresh(state), idle_counters(state)]

    def tuned(self, state: AppState) -> list:
        return [*self.local.tuned(state), gr.update()]


def build(state: AppState, gen: controls.Controls, view: SimpleNamespace | None = None) -> ChatView:
    """Wire the tab (laid out by ``layout``, or here) to the shared settings ``gen`` (Pair settings)."""
    view = view or layout(state)
    ctrl = view.local + gen
    sessions = Sessions()  # per browser session: the conversation and its queue
    wire(state, view, ctrl, sessions, Notes())
    return ChatView(ctrl, view.local, view.counters, view.settings_line, view.goto, view.conversation, view.saved,
                    sessions)


def layout(state: AppState) -> SimpleNamespace:
    """Place the components; returned by name for ``wire``."""
    last = gr.State({})  # the latest reply: summary, speculative, messages, resolved, at, plain
    saved = gr.BrowserState([], storage_key=keep.STORAGE_KEY, secret=keep.secret())
    with gr.Row(equal_height=False):
        with gr.Column(scale=5):
            conversation = gr.HTML(display([]), elem_id="tdm-chatbot")
            with gr.Row():
                box = gr.Textbox(placeholder="Message · Enter sends, Shift+Enter adds a line", lines=1,
                                 max_lines=8, show_label=False, scale=6, elem_id="tdm-chat-input")
                send = gr.Button("Send", variant="primary", scale=1, min_width=64, elem_id="tdm-send")
            with gr.Row():
                stop = gr.Button("Stop", variant="stop", size="sm", elem_id="tdm-stop")
                regen = gr.Button("Regenerate", size="sm", elem_id="tdm-regen")
                clear = gr.Button("New chat", size="sm", elem_id="tdm-clear")
                colour = gr.Checkbox(True, label="Colour tokens", elem_id="tdm-colour", min_width=120)
            status = gr.HTML("", elem_id="tdm-chat-status")
        with gr.Column(scale=4):
            gr.HTML(panel.legend_html(KINDS), elem_id="tdm-legend")
            counters = gr.HTML(idle_counters(state), elem_id="tdm-counters")
            with gr.Row():
                measure = gr.Button("Measure plain speed", size="sm", elem_id="tdm-measure")
                faster = gr.Button("Make it faster", size="sm", variant="secondary", elem_id="tdm-faster")
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

    def on_push(request: gr.Request, message: str, *values):
        return push_user(state, sessions, request, message, *values)

    def on_regen(request: gr.Request, *values):
        return regenerate(state, sessions, notes, request, *values)

    def on_respond(request: gr.Request):
        for out in respond(state, sessions, notes, ctrl, request):
            notes.said(session_key(request), out[2])
            yield out

    def on_stop(request: gr.Request):
        return do_stop(state, sessions, notes, request)

    def on_clear(request: gr.Request):
        return do_clear(state, sessions, notes, request)

    def on_measure(request: gr.Request, last_run: dict):
        return do_measure(state, sessions, request, last_run)

    def on_faster(progress=gr.Progress()):
        return do_faster(state, ctrl, progress)

    def on_save(request: gr.Request):
        return keep.saved(sessions.history(session_key(request)))

    private: dict[str, Any] = dict(api_visibility="private")
    save: dict[str, Any] = dict(fn=on_save, inputs=None, outputs=[v.saved], queue=False, show_progress="hidden",
                                **private)
    reply_loop = dict(fn=on_respond, inputs=None, outputs=[v.conversation, v.counters, v.status, v.last, v.box],
                      show_progress="hidden", trigger_mode="multiple", **private, **GEN)
    for trigger in (v.send.click, v.box.submit):
        trigger(on_push, [v.box, *ctrl.components], [v.box, v.conversation, v.status], queue=False, **private) \
            .then(**reply_loop).then(**save)
    v.regen.click(on_regen, ctrl.components, [v.conversation, v.status], queue=False, **private) \
        .then(**reply_loop).then(**save)
    v.stop.click(on_stop, None, [v.status], queue=False, **private)
    v.clear.click(on_clear, None, [v.conversation, v.counters, v.status, v.last, v.note], queue=False, **private) \
        .then(**save)
    # the class goes on <body>; the style sheet's rule for it wins over the tints (see style.py)
    v.colour.change(None, [v.colour], None, js="(on) => { document.body.classList.toggle('tdm-nocolour', !on); }")
    v.measure.click(on_measure, [v.last], [v.conversation, v.counters, v.note, v.last], show_progress="minimal",
                    show_progress_on=[v.note], **private, **GEN).then(**save)
    v.faster.click(on_faster, None, [v.note, *ctrl.components], show_progress_on=[v.note], **private, **GEN)


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


def push_user(state: AppState, sessions: Sessions, request: gr.Request, message: str, *values):
    if not message or not message.strip():
        return gr.update(), gr.update(), panel.status_html("Type a message first.", "info")
    key = session_key(request)
    if sessions.push(key, message, values):
        return "", gr.update(), panel.status_html(QUEUED, "wait")
    state.stop_event(key)  # armed now: a Stop before the reply starts still counts
    note_ = panel.status_html(WAITING, "wait") if state.busy else panel.status_html("Starting…", "info")
    return "", display(sessions.history(key), queued=sessions.queued(key)), note_


def regenerate(state: AppState, sessions: Sessions, notes: Notes, request: gr.Request, *values):
    key = session_key(request)
    if sessions.active(key):
        return gr.update(), panel.status_html("Wait for the reply to finish (or Stop it) first.", "info")
    hist = sessions.history(key)
    notes.replaced.pop(key, None)
    if hist and hist[-1]["role"] == "assistant":
        notes.replaced[key] = hist[-1]["content"]
        hist = hist[:-1]
    if not hist or hist[-1]["role"] != "user":
        return display(hist), panel.status_html("Nothing to regenerate yet.", "info")
    state.stop_event(key)
    sessions.set_history(key, hist[:-1])
    sessions.push(key, hist[-1]["content"], values, front=True)
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
    ``replaced``: the reply a Regenerate replaces."""
    text, values = item
    key, keep = claim.key, gr.update()

    def fail(message: str):
        sessions.set_history(key, hist)
        return display(hist), keep, panel.status_html(message, "error"), keep, text

    asked = hist + [{"role": "user", "content": text}]
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
    spec, live, shown_at, cost = resolved["speculative"], None, 0.0, 0.0
    try:
        for status, live in chat.chat_stream(state, messages, resolved, state.armed_stop_event(key)):
            if sessions.stale(claim):
                return None
            if status == RunStatus.WAITING:
                yield display(asked), keep, panel.status_html(WAITING, "wait"), keep, keep
                continue
            if live.error or (status != RunStatus.DONE and time.perf_counter() - shown_at < max(0.1, 6 * cost)):
                continue  # big replies render less often, so rendering never competes with decoding
            t0 = time.perf_counter()
            queued = sessions.queued(key)
            streaming = {"role": "assistant", "tokens": reply.compact(live.tokens, live.draft_texts),
                         "streaming": status != RunStatus.DONE}
            view = display(asked, streaming, queued)
            snapshot = {"summary": live.summary(), "speculative": spec, "resolved": resolved}
            shown_at, cost = time.perf_counter(), time.perf_counter() - t0
            waiting = f" · {len(queued)} message{'s' * (len(queued) > 1)} queued" if queued else ""
            yield (view, reply_counters(state, snapshot)[0],
                   panel.status_html(f"Generating… (Stop ends it within one step){waiting}", "info"), keep, keep)
    except Exception as exc:  # never let a bad input take the tab down
        yield fail(ui_message(exc))
        return True, {}, text
    if live is None or sessions.stale(claim):
        return None
    if live.error:  # e.g. the prompt is past the context
        yield fail(live.error)
        return True, {}, text
    last_run = {"summary": live.summary(), "speculative": spec, "messages": messages, "resolved": resolved,
                "at": time.time(), "plain": None}
    counters_view, claim_ = reply_counters(state, last_run)
    toks = reply.compact(live.tokens, live.draft_texts)
    hist = asked + [{"role": "assistant", "content": live.text, "html": reply.render(toks), "tokens": toks,
                     "line": line_for(last_run, claim_)}]
    sessions.set_history(key, hist)
    reason = live.done.reason if live.done else StopReason.STOPPED
    said = f"{panel.reason_text(reason).capitalize()} · {len(live.tokens)} tokens"
    same = replaced is not None and (live.text.startswith(replaced) or replaced.startswith(live.text))
    if same and resolved["temperature"] == 0:  # (up to the reply length: max tokens may have changed)
        said += (" · T = 0 is deterministic: the same reply. Raise the temperature (Pair settings) for a "
                 "different one.")
    done = panel.status_html(said, "ok")
    yield display(hist, queued=sessions.queued(key)), counters_view, done, last_run, keep
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


def do_faster(state: AppState, ctrl: controls.Controls, progress: gr.Progress):
    try:
        message, settings = make_faster(state, lambda f, d: progress(f, desc=d))
    except Exception as exc:
        return (panel.status_html(f"Could not make it faster: {ui_message(exc)}", "error"),
                *[gr.update()] * len(ctrl.components))
    return panel.status_html(message, "ok"), *ctrl.apply(settings)
