"""Gradio Blocks app: builds the tabs around one AppState and serves them.

``serve`` is what ``python launcher.py`` runs: it makes the demo pair present (progress in the terminal),
loads it, builds the UI and serves it on the first free port from ``port``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline and private: no telemetry calls

import gradio as gr  # noqa: E402

from app.engine.remote.rpc import LOOPBACK  # noqa: E402
from app.service import firstrun, settings as S  # noqa: E402
from app.service.loading import app_state, say, startup_pair  # noqa: E402
from app.service.ports import free_port  # noqa: E402
from app.service.state import AppState, backend_name, session_key  # noqa: E402
from app.ui import api, offer, panel  # noqa: E402
from app.ui.controls import GEN, Controls, problem, summary_html  # noqa: E402
from app.ui.tabs import bench, chat, compare, models, pair  # noqa: E402

SHUTDOWN_GRACE_S = 1.0  # after SIGTERM / SIGINT: time for queued requests' 503 and streams' last chunks

def theme() -> gr.themes.Base:
    system = ["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"]
    mono = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]
    soft = gr.themes.Soft(primary_hue="emerald", secondary_hue="sky", neutral_hue="slate", font=system,
                          font_mono=mono, radius_size="md", spacing_size="sm", text_size="md")
    # Soft's muted text, label chips, info lines, placeholders, selected radios and primary buttons read at 2.2-3.8:1
    # (WCAG AA wants 4.5:1); these reach it in light and dark mode (tests/ui/test_browser_a11y.py measures every text)
    return soft.set(block_title_text_color="*primary_800", block_title_background_fill_dark="*primary_800",
                    block_info_text_color="*neutral_600", block_label_text_color="*primary_700",
                    block_label_background_fill_dark="*primary_800",
                    body_text_color_subdued="*neutral_600", input_placeholder_color="*neutral_500",
                    input_placeholder_color_dark="*neutral_300",
                    checkbox_label_background_fill_selected="*primary_700",
                    checkbox_label_background_fill_selected_dark="*primary_700",
                    button_primary_background_fill="*primary_700", button_primary_background_fill_hover="*primary_800",
                    button_primary_background_fill_dark="*primary_700",
                    button_primary_background_fill_hover_dark="*primary_800")


def build_app(state: AppState) -> gr.Blocks:
    with gr.Blocks(title="Tandem — speculative decoding", analytics_enabled=False) as demo:
        _api_endpoints(state)  # first, so /chat and /compare keep their names whatever the tabs call their handlers
        header = gr.HTML(_header(state), elem_id="tdm-header")
        offer_view = offer.layout()  # a stand-in target, where the loaded pair cannot pay here (service/firstrun.py)
        with gr.Tabs(overflow_behavior="wrap", elem_id="tdm-tabs") as tabs:  # on a phone: every tab, none in ⋯
            with gr.Tab("Chat", id="chat"):
                chat_layout = chat.layout(state)
            with gr.Tab("Compare", id="compare"):
                compare_layout = compare.layout(state)
            with gr.Tab("Pair settings", id="pair"):
                pair_info, pair_loaded, pair_view = pair.build(state)
            with gr.Tab("Models", id="models"):
                pair.follow(pair_view, models.build(state))  # Pair settings' lists follow the models folder
            with gr.Tab("Benchmark", id="bench"):
                bench_view = bench.build(state)
        gen = pair_view.gen  # the one set of generation settings: Chat and Compare read it
        chat_view = chat.build(state, gen, chat_layout)
        compare_view = compare.build(state, gen, compare_layout)
        _wire_settings(gen, pair_view.gen_status, [chat_view.settings_line, compare_view.settings_line],
                       [chat_view.goto, compare_view.goto], tabs)
        pair_loaded.then(lambda: _header(state, ready=True), None, [header], api_visibility="private", queue=False,
                         show_progress="hidden")
        _follow_pair(state, pair_loaded, [chat_view.counters, chat_layout.last, chat_layout.note], bench_view)
        switches = offer.wire(demo, state, offer_view)
        for switched in switches:  # the offer loaded another pair: what names it follows
            switched.then(lambda: _header(state, ready=True), None, [header], api_visibility="private", queue=False,
                          show_progress="hidden")
            switched.then(lambda: pair.info_html(state), None, [pair_info], api_visibility="private", queue=False,
                          show_progress="hidden")
            _follow_pair(state, switched, [chat_view.counters, chat_layout.last, chat_layout.note], bench_view)
        pair_loaded.then(lambda: gen.choices(state), None, gen.components,  # MTP offered or not
                         api_visibility="private", queue=False, show_progress="hidden")
        for loaded in (pair_loaded, *switches):  # Chat's mode and base-model notice follow the loaded target
            chat_view.follow(loaded)
        local = chat_view.local + compare_view.local
        tuned = bench_view.applied
        if tuned is not None:  # "Use this" or a full sweep changed the defaults: the open Chat and Compare follow
            tuned.change(lambda: (local + gen).tuned(state), None, (local + gen).components,
                         api_visibility="private", queue=False, show_progress="hidden")

        def on_load(request: gr.Request, data):
            line = summary_html(S.defaults(state.defaults))
            return [_header(state, ready=True), pair.info_html(state), *(local + gen).refresh(state),
                    *chat.on_page_load(state, chat_view.sessions, request, data), line, line]

        demo.load(on_load, [chat_view.saved],
                  [header, pair_info, *(local + gen).components, chat_view.counters, chat_view.conversation,
                   chat_view.settings_line, compare_view.settings_line],
                  api_visibility="private", queue=False, show_progress="hidden")
    return demo


def _follow_pair(state: AppState, loaded: Any, chat_panel: list, bench_view: Any) -> None:
    """After another pair is loaded every figure on screen is the new pair's: the Chat panel's (``chat_panel``:
    the counters, the last reply whose plain run Measure would time, the measure note — all the previous
    pair's) and the Benchmark tab's latest sweep."""
    def chat_figures():
        name = state.pair_id or Path(state.target_path or "?").name
        return panel.pair_counters_html(name, state.baseline()), {}, ""

    loaded.then(chat_figures, None, chat_panel, api_visibility="private", queue=False, show_progress="hidden")
    loaded.then(lambda: bench.follow_pair(state, bench_view), None, bench.follow_outputs(bench_view),
                api_visibility="private", queue=False, show_progress="hidden")


def _wire_settings(gen: Controls, status: Any, lines: list, gotos: list, tabs: gr.Tabs) -> None:
    """Any change of the shared settings: checked at once (the range named where a value is out of it) and
    shown read-only in Chat and Compare, whose buttons lead to them."""
    def check(*values):
        settings = gen.to_dict(values)
        wrong = problem(settings)
        return [panel.status_html(wrong, "error") if wrong else "", *[summary_html(settings)] * len(lines)]

    # One listener for every control, run one at a time and always with the latest values: the page's load handler
    # sets the controls (each firing a change), and a stale answer arriving after a newer one would show old settings.
    gr.on([component.change for component in gen.components], check, gen.components, [status, *lines],
          api_visibility="private", trigger_mode="always_last", concurrency_limit=1, show_progress="hidden")
    for button in gotos:
        button.click(lambda: gr.Tabs(selected="pair"), None, [tabs], api_visibility="private", queue=False)


def _header(state: AppState, ready: bool = False) -> str:
    """The title line and the loaded pair; ``ready`` marks the version the page's load handler sends, after
    which the settings on screen are the current ones (what a browser test waits for before typing)."""
    info = state.describe_pair()
    if info["loaded"]:
        t, d = info["target"], info.get("draft")
        pair = f"target {_model_name(t)} · " + (f"draft {_model_name(d)}" if d else "no draft (prompt lookup only)")
        if info.get("standin"):
            pair += f" · {info['standin']}"
    else:
        pair = "no pair loaded"
    mark = ' class="tdm-ready"' if ready else ""
    row = "display:flex;justify-content:space-between;align-items:baseline;gap:12px;flex-wrap:wrap"
    return (f'<div{mark} style="{row}">'
            f'<div><span style="font-size:20px;font-weight:700">Tandem</span> '
            f'<span class="tdm-muted">speculative decoding, locally</span></div>'
            f'<div class="tdm-muted" title="{panel.esc(_files(info))}">{panel.esc(pair)} · '
            f'{panel.esc(backend_name())}</div></div>')


def _model_name(facts: dict) -> str:
    """'SmolLM2-135M-Instruct F32' from 'SmolLM2-135M-Instruct.F32.gguf' (the file name, less its extension)."""
    name = facts["file"].removesuffix(".gguf")
    stem, dot, quant = name.rpartition(".")
    return f"{stem} {quant}" if dot and stem else name


def _files(info: dict) -> str:
    if not info["loaded"]:
        return ""
    d = info.get("draft")
    return f"target file {info['target']['file']}" + (f", draft file {d['file']}" if d else "")


def _raw_text(label: str) -> gr.Textbox:
    """A hidden text input that hands the handler what the client sent: ``gr.Textbox`` turns a number or a
    list into a string, and the API must answer such a message with an error, not a reply. (An instance
    override: a subclass of a Gradio component would write a .pyi file next to this module.)"""
    box = gr.Textbox(label=label)
    box.preprocess = lambda payload: payload  # type: ignore[method-assign]
    return box


def _api_endpoints(state: AppState) -> None:
    """``/chat`` and ``/compare`` for gradio_client (hidden components, documented in docs/api.md)."""
    with gr.Row(visible=False):
        message = _raw_text("message")
        history = gr.JSON(label="history")
        settings = gr.JSON(label="settings")
        chat_out = gr.JSON(label="result")
        prompt = _raw_text("prompt")
        compare_out = gr.JSON(label="result")
        runs = gr.State([])
        chat_btn = gr.Button("chat")
        compare_btn = gr.Button("compare")

    def chat(message: str, history: list, settings: dict, request: gr.Request):
        """Streamed chat reply; the last output has text, acceptance_rate, mean_accepted, tokens_per_s, tokens."""
        yield from api.api_chat(state, message, history, settings, session_key(request, "api"))

    def compare(prompt: str, settings: dict, runs: list, request: gr.Request):
        """Plain and speculative runs of one prompt; the last output has plain_text, spec_text, identical,
        speedup, acceptance_rate, plain_tps, spec_tps."""
        for payload in api.api_compare(state, prompt, settings, session_key(request, "api"), runs):
            yield payload

    chat_btn.click(chat, [message, history, settings], [chat_out], api_name="chat", **GEN)
    compare_btn.click(compare, [prompt, settings, runs], [compare_out], api_name="compare", **GEN)


Mount = Callable[[Any, AppState, Optional[str]], Any]  # (the server's FastAPI app, state, API key): the API routes


def mount_openai_api(demo: gr.Blocks, state: AppState, host: str, api_key: Optional[str], mount: Mount) -> None:
    """The OpenAI-compatible API and /metrics on the UI's own server (same pair, same generation queue): the
    routes are ``app.server``'s, handed in by the command line (the UI never imports the server)."""
    if host not in LOOPBACK and not api_key:
        say("the OpenAI-compatible API (/v1) is off: beyond loopback it needs --api-key KEY")
        return
    mount(demo.app, state, api_key)
    say("OpenAI-compatible API under /v1 (metrics: /metrics)")


def serve(host: str = "127.0.0.1", port: int = 7860, open_browser: bool = True, auth: Optional[str] = None,
          pair_id: Optional[str] = None, api_key: Optional[str] = None,
          gpu_layers: tuple = ("auto", "auto"), rpc: tuple = (), api: Optional[Mount] = None,
          on_shutdown: Optional[Callable[[], None]] = None, middleware: Sequence[Any] = ()) -> int:
    """``middleware``: the server's checks around every route (Host and Origin: ``app.server.guard``), handed in
    by the command line like ``api`` and given to Gradio's FastAPI app when it is made, so they are in place
    before its first request."""
    credentials = None
    if auth:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise SystemExit("--auth must be user:password")
        credentials = (user, password)
    if host not in LOOPBACK:
        if credentials is None:
            raise SystemExit(f"refusing to serve on {host}: anyone on the network could use it. "
                             "Add --auth user:password, or keep the default 127.0.0.1.")
        say(f"WARNING: serving on {host} — reachable from other machines; protect it (password, firewall).")
    state = app_state(gpu_layers, rpc)
    startup_pair(state, pair_id)
    firstrun.at_start(state, explicit=pair_id is not None, announce=say)  # a GPU where the demo pair cannot pay
    demo = build_app(state)
    demo.queue(default_concurrency_limit=4)
    chosen = free_port(host, port)
    if chosen != port:
        say(f"port {port} is taken; using {chosen}")
    say(f"serving on http://{'127.0.0.1' if host == 'localhost' else host}:{chosen}  (Ctrl+C to quit)")
    try:
        demo.launch(server_name=host, server_port=chosen, inbrowser=open_browser, auth=credentials,
                    share=False, show_error=True, quiet=True, theme=theme(), css=panel.CSS, head=panel.HEAD,
                    footer_links=["api"], ssr_mode=False, pwa=False, mcp_server=False, prevent_thread_lock=True,
                    app_kwargs={"middleware": list(middleware)})
        if api is not None:
            mount_openai_api(demo, state, host, api_key, api)
        _graceful_signals(state, on_shutdown)
        demo.block_thread()
    finally:
        state.unload()
    return 0


def _graceful_signals(state: AppState, on_shutdown: Optional[Callable[[], None]]) -> None:
    """SIGTERM / SIGINT: running generations stop at their next step, the API answers queued requests 503
    (``on_shutdown``), and after a moment for those answers Gradio closes the server; a second signal at once."""

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signum, signal.default_int_handler)  # a second signal: no more waiting
        state.stop_all()
        if on_shutdown is not None:
            on_shutdown()
        time.sleep(SHUTDOWN_GRACE_S)  # the server's threads answer meanwhile; this one only waits
        raise KeyboardInterrupt  # Gradio's block_thread closes the server

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve())
