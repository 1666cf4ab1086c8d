"""Chat tab: multi-turn streaming chat beside the live acceptance panel."""

from __future__ import annotations

import gradio as gr

from app.engine.events import KINDS
from app.ui import api, controls, panel
from app.ui import settings as S
from app.ui.runner import describe_error
from app.ui.state import AppState, session_key

GEN = dict(concurrency_id="generation", concurrency_limit=1)
WAITING = "Waiting for another generation to finish (in another tab, the API or a benchmark); yours starts next."


def display(history: list[dict], partial: str | None = None) -> list[dict]:
    """Chatbot messages with the text escaped (the chatbot shows it as text, never as HTML)."""
    msgs = [{"role": m["role"], "content": panel.esc(m["content"])} for m in history if m["role"] != "system"]
    if partial is not None:
        msgs.append({"role": "assistant", "content": panel.esc(partial) or "…"})
    return msgs


def counters_for(state: AppState, summary: dict | None, speculative: bool) -> str:
    return panel.counters_html(summary or {}, speculative, state.baseline())


def build(state: AppState) -> None:
    history = gr.State([])  # raw messages [{"role", "content"}] (unescaped)
    last = gr.State({"summary": {}, "speculative": True})
    with gr.Row(equal_height=False):
        with gr.Column(scale=5):
            chatbot = gr.Chatbot(label="Conversation", height=460, render_markdown=False, sanitize_html=True,
                                 elem_classes=["tdm-chat"], elem_id="tdm-chatbot", feedback_options=None,
                                 placeholder="Ask something. The panel on the right shows which tokens the "
                                             "draft got right.")
            with gr.Row():
                box = gr.Textbox(placeholder="Message (Enter to send, Shift+Enter for a new line)", lines=2,
                                 max_lines=8, show_label=False, scale=6, elem_id="tdm-chat-input")
                send = gr.Button("Send", variant="primary", scale=1, elem_id="tdm-send")
            with gr.Row():
                stop = gr.Button("Stop", variant="stop", size="sm", elem_id="tdm-stop")
                regen = gr.Button("Regenerate", size="sm", elem_id="tdm-regen")
                clear = gr.Button("Clear", size="sm", elem_id="tdm-clear")
            status = gr.HTML("", elem_id="tdm-chat-status")
        with gr.Column(scale=4):
            gr.HTML(panel.legend_html(KINDS), elem_id="tdm-legend")
            tokens = gr.HTML(panel.tokens_html([], empty="Tokens appear here, coloured by provenance; hover "
                                                         "one for its step, draft position and draft probability."),
                             elem_id="tdm-panel")
            counters = gr.HTML(counters_for(state, None, True), elem_id="tdm-counters")
            with gr.Row():
                measure = gr.Button("Measure baseline", size="sm", elem_id="tdm-measure", scale=0, min_width=160)
                baseline_note = gr.HTML("")
            ctrl = controls.build(state, "chat")

    # --- handlers ------------------------------------------------------------------------------------------

    def push_user(message: str, hist: list, request: gr.Request):
        if not message or not message.strip():
            return gr.update(), hist, display(hist), panel.status_html("Type a message first.", "info")
        state.stop_event(session_key(request))  # armed now: a Stop before the reply starts still counts
        hist = hist + [{"role": "user", "content": message}]
        note = panel.status_html(WAITING, "wait") if state.busy else panel.status_html("Starting…", "info")
        return "", hist, display(hist), note

    def pop_assistant(hist: list, request: gr.Request):
        state.stop_event(session_key(request))
        if hist and hist[-1]["role"] == "assistant":
            hist = hist[:-1]
        note = panel.status_html(WAITING, "wait") if state.busy else ""
        return hist, display(hist), note

    def respond(request: gr.Request, hist: list, *values):
        """Stream the assistant's reply: chatbot, panel, counters, status, history, last-run summary."""
        if not hist or hist[-1]["role"] != "user":
            yield gr.update(), gr.update(), gr.update(), panel.status_html("Nothing to answer yet.", "info"), \
                hist, gr.update(), gr.update()
            return
        try:
            resolved = S.resolve(ctrl.to_dict(values), S.defaults(state.defaults))
        except S.SettingsError as exc:
            yield gr.update(), gr.update(), gr.update(), panel.status_html(str(exc), "error"), hist, \
                gr.update(), gr.update()
            return
        messages = api.build_messages(hist[:-1], hist[-1]["content"], resolved["system"])
        spec = resolved["speculative"]
        stop_ev = state.armed_stop_event(session_key(request))
        live = None
        try:
            for status, live in api.chat_stream(state, messages, resolved, stop_ev):
                if status == "waiting":
                    yield gr.update(), gr.update(), gr.update(), panel.status_html(WAITING, "wait"), hist, \
                        gr.update(), gr.update()
                    continue
                if live.error:
                    break
                running = status != "done"
                note = panel.status_html("Generating… (Stop ends it within one step)", "info") if running else ""
                yield (display(hist, live.text), panel.tokens_html(live.tokens, cursor=running),
                       counters_for(state, live.summary(), spec), note, hist, gr.update(), gr.update())
        except Exception as exc:  # never let a bad input take the tab down
            yield gr.update(), gr.update(), gr.update(), panel.status_html(describe_error(exc), "error"), \
                hist, gr.update(), gr.update()
            return
        if live is None:
            return
        if live.error:  # e.g. the prompt is past the context: drop the turn, give the text back
            hist = hist[:-1]
            yield (display(hist), gr.update(), gr.update(), panel.status_html(live.error, "error"), hist,
                   gr.update(), messages[-1]["content"])
            return
        hist = hist + [{"role": "assistant", "content": live.text}]
        summary = live.summary()
        done = panel.reason_text(live.done.reason if live.done else "stopped")
        tps = summary.get("tokens_per_s") or 0.0
        note = panel.status_html(f"{done.capitalize()} · {len(live.tokens)} tokens · {tps:.1f} tok/s", "ok")
        yield (display(hist), panel.tokens_html(live.tokens), counters_for(state, summary, spec), note, hist,
               {"summary": summary, "speculative": spec}, gr.update())

    def do_stop(request: gr.Request):
        stopped = state.request_stop(session_key(request))
        return panel.status_html("Stopping…" if stopped else "Nothing is running.", "info")

    def do_clear():
        return [], [], panel.tokens_html([]), counters_for(state, None, True), "", {"summary": {},
                                                                                    "speculative": True}

    def do_measure(last_run: dict, progress=gr.Progress()):
        if state.pair is None:
            return gr.update(), panel.status_html("Load a pair first (Pair settings).", "error")
        progress(0.1, desc="measuring plain decoding")
        try:
            from app.ui.baseline import measure_baseline

            entry = measure_baseline(state)
        except Exception as exc:
            return gr.update(), panel.status_html(describe_error(exc), "error")
        note = panel.status_html(f"Baseline: plain decoding at {entry['tps']:.1f} tok/s on this pair and machine "
                                 "(stored for later sessions).", "ok")
        return counters_for(state, last_run.get("summary"), last_run.get("speculative", True)), note

    gen_outputs = [chatbot, tokens, counters, status, history, last, box]
    for trigger in (send.click, box.submit):
        trigger(push_user, [box, history], [box, history, chatbot, status], queue=False,
                api_visibility="private").then(respond, [history, *ctrl.components], gen_outputs,
                                               api_visibility="private", show_progress="hidden", **GEN)
    regen.click(pop_assistant, [history], [history, chatbot, status], queue=False, api_visibility="private") \
        .then(respond, [history, *ctrl.components], gen_outputs, api_visibility="private",
              show_progress="hidden", **GEN)
    stop.click(do_stop, None, [status], queue=False, api_visibility="private")
    clear.click(do_clear, None, [chatbot, history, tokens, counters, status, last], queue=False,
                api_visibility="private")
    measure.click(do_measure, [last], [counters, baseline_note], api_visibility="private", **GEN)
    return ctrl
