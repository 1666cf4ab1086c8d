"""The Benchmark tab's "How big must the target be?": the loaded pair's draft against stand-in targets of growing
size (``service/sizesweep.py``), with what each size needs checked first, progress, Cancel, the two plots, the
sizes' table and the one-line recommendation. Endpoint ``/size_sweep`` (gradio_client) returns the result's JSON:
``rows``, ``recommendation``, ``skipped``, ``files``, ``run_id``, ``partial``.

``layout`` places the components inside the Benchmark tab; ``wire`` connects them (and refreshes the tab's
History table, handed in, after a sweep)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Optional

import gradio as gr

from app.engine import limits
from app.lab.sizereport import PAYS
from app.lab.sizes import DEFAULT_FACTORS, DEFAULT_K, DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, FTYPE_CHOICES, \
    SizeError, parse_factors
from app.models.standin import StandinError, params_label
from app.service import sizesweep
from app.service.state import session_key
from app.ui import files
from app.ui.api import disk_words, refused
from app.ui.controls import GEN
from app.ui.panel import _fmt as _f

HEADERS = ["target", "parameters", "plain tok/s", "c", "accept", "tok/pass", "speedup", "spread", "bound", "same"]
PLOTS = ("speedup_vs_size", "speedup_vs_c")
INTRO = ("#### How big must the target be?\n"
         "The loaded pair's draft against its target widened 2, 4, 8 … times with zero weights: a **stand-in** "
         "writes the same text (so the draft is right just as often) at the cost of a bigger model. Where the "
         "measured speedup crosses {pays:.1f}x is the size from which a draft of this cost pays on this machine. "
         "Missing stand-ins are derived first (their disk and memory are checked before anything is written); "
         "x1 is the target itself. The draft model alone, fixed K, greedy.")
NO_RESULT = "No size sweep yet: **Check sizes** says what each size needs here, **Run size sweep** measures them."
RUNNING = "**A size sweep is running** — its progress is shown above; Cancel keeps the sizes measured so far."


def layout() -> SimpleNamespace:
    with gr.Accordion("How big must the target be? (stand-in sizes)", open=True, elem_id="tdm-sizes"):
        gr.Markdown(INTRO.format(pays=PAYS))
        with gr.Row():
            factors = gr.Textbox(",".join(map(str, DEFAULT_FACTORS)), label="Sizes", scale=2,
                                 info="1 = the loaded target; 2, 4, 8 … = stand-ins that many times wider "
                                      "(8: 28 GB at F32)", elem_id="tdm-sizes-factors")
            ftype = gr.Dropdown(list(FTYPE_CHOICES), value="auto", label="Stand-ins' type", scale=1,
                                info="auto: the target's own where it fits in memory, else F16")
            # not "Tokens per run", the sweep's field above: a page (and a browser test) finds a field by its label
            tokens = gr.Number(DEFAULT_MAX_TOKENS, label="Tokens per reply", precision=0, scale=1)
            prompts = gr.Number(DEFAULT_PROMPTS, label="Prompts", precision=0, scale=1, info="0: the whole suite")
            k = gr.Number(DEFAULT_K, label="K", precision=0, scale=1, info="draft tokens per target pass")
        with gr.Row():
            check_btn = gr.Button("Check sizes", elem_id="tdm-sizes-check")
            run_btn = gr.Button("Run size sweep", variant="primary", elem_id="tdm-sizes-run")
            cancel_btn = gr.Button("Cancel", variant="stop", elem_id="tdm-sizes-cancel")
        status = gr.Markdown("", elem_id="tdm-sizes-status")  # the plan, then the sweep's progress
        recommendation = gr.Markdown(NO_RESULT, elem_id="tdm-sizes-recommendation")
        with gr.Row(elem_classes="tdm-plots"):
            plot_size = gr.Image(type="pil", interactive=False, show_label=False, elem_id="tdm-sizes-plot-size",
                                 min_width=420)
            plot_c = gr.Image(type="pil", interactive=False, show_label=False, elem_id="tdm-sizes-plot-c",
                              min_width=420)
        table = gr.Dataframe(headers=HEADERS, value=[], label="Sizes (medians over the prompts)", interactive=False,
                             elem_id="tdm-sizes-table")
        result_json = gr.JSON(visible=False)
    return SimpleNamespace(**locals())


def wire(state, v: SimpleNamespace, tab: SimpleNamespace, hist: Callable[[], Any],
         history_rows: Callable[[Any], list]) -> None:
    """Connect the buttons. ``tab``: the Benchmark tab's components — its History table is refreshed after a
    sweep, and its "Show A" shows a stored size sweep here; ``hist()`` opens the history."""
    inputs = [v.factors, v.ftype, v.tokens, v.prompts, v.k]
    shown = [v.status, v.recommendation, v.plot_size, v.plot_c, v.table]

    def on_run(factors: str, ftype: str, tokens, prompts, k, request: gr.Request, progress=gr.Progress()) -> dict:
        return run_sweep(state, factors, ftype, tokens, prompts, k, request, progress)

    def on_render(result: Optional[dict]):
        return (*render(result), history_rows(hist()))

    v.check_btn.click(lambda *a: check(state, *a), inputs, [v.status], api_visibility="private",
                      show_progress_on=[v.status])
    v.run_btn.click(lambda: RUNNING, None, [v.recommendation], queue=False, show_progress="hidden",
                    api_visibility="private")
    v.run_btn.click(on_run, inputs, [v.result_json], api_name="size_sweep", show_progress_on=[v.status], **GEN) \
        .then(on_render, [v.result_json], [*shown, tab.runs], api_visibility="private", show_progress="hidden")
    def on_cancel(request: gr.Request) -> str:
        return cancel(state, request)

    v.cancel_btn.click(on_cancel, None, [v.status], queue=False, api_visibility="private")
    tab.show_btn.click(lambda a: show(hist(), a), [tab.run_a], shown, api_visibility="private",
                       show_progress="hidden")


def show(history: Any, run_id) -> tuple:
    """A stored size sweep shown here ("Show A" in the History); any other run leaves this part as it is."""
    text = str(run_id if run_id is not None else "").strip().lstrip("#")
    run = history.get(int(text)) if text.isdigit() else None
    result = (run or {}).get("result") or {}
    if result.get("kind") != "sizes":
        return tuple(gr.update() for _ in range(5))
    return render(result)


def _config(factors: str, ftype: str, tokens, prompts, k):
    try:
        return sizesweep.config(parse_factors(factors or ""), str(ftype or "auto"),
                                limits.form_int("k", k if k not in (None, "") else DEFAULT_K),
                                limits.form_int("max_tokens", tokens or DEFAULT_MAX_TOKENS),
                                max(0, int(prompts if prompts not in (None, "") else DEFAULT_PROMPTS)))
    except (SizeError, ValueError) as exc:
        raise refused(str(exc)) from None


def check(state, factors: str, ftype: str, tokens, prompts, k) -> str:
    """What each size is and needs here, before anything is written."""
    cfg = _config(factors, ftype, tokens, prompts, k)
    try:
        lines = [p.line() for p in sizesweep.plans(state, cfg)]
    except (sizesweep.SizeSweepRefused, StandinError) as exc:
        raise refused(str(exc)) from None
    return "\n".join(["What each size needs here:", *(f"- {line}" for line in lines)])


def _cancel_key(request) -> str:
    return "sizes:" + session_key(request, "api")


def run_sweep(state, factors: str, ftype: str, tokens, prompts, k, request: gr.Request, progress) -> dict:
    cfg = _config(factors, ftype, tokens, prompts, k)
    stop = state.stop_event(_cancel_key(request))
    progress(0.0, desc="checking what each size needs")
    command = (f"python launcher.py tune --pair {state.pair_id or '…'} --sizes {','.join(map(str, cfg.factors))} "
               f"--ftype {cfg.ftype} --k {cfg.k} --max-tokens {cfg.max_tokens} --size-prompts {len(cfg.prompts)}")
    try:
        with disk_words():
            return sizesweep.run(state, cfg, lambda f, what: progress(f, desc=what), stop, command)
    except (sizesweep.SizeSweepRefused, StandinError) as exc:
        raise refused(str(exc)) from None


def cancel(state, request: gr.Request) -> str:
    state.request_stop(_cancel_key(request))
    return "Cancelling after the current run… the sizes measured so far are kept in the History."


def rows(result: Optional[dict]) -> list[list]:
    out = []
    for r in (result or {}).get("rows", []):
        same = "–" if r["identical"] is None else "yes" if r["identical"] else "NO"
        out.append([r["label"], params_label(r["params"]), _f(r["baseline_tps"], ".1f"), _f(r["c"]),
                    _f(r["acceptance_rate"], ".0%"), _f(r["mean_accepted"]), _f(r["speedup"], ".2f", "x"),
                    f"{_f(r['speedup_min'])}–{_f(r['speedup_max'])}", _f(r["bound"], ".2f", "x"), same])
    return out


def _images(result: Optional[dict]) -> list:
    return files.plot_images(result, PLOTS)


def render(result: Optional[dict]) -> tuple:
    """(status, recommendation, size plot, c plot, table) for a result (None: nothing yet)."""
    if not result:
        return "", NO_RESULT, None, None, []
    head = (f"Size sweep, history run #{result.get('run_id')}: {len(result.get('rows', []))} sizes measured in "
            f"{result.get('duration_s')} s" + (" — **cancelled, partial**" if result.get("partial") else "") + ".")
    skipped = [f"- skipped {s['size']}: {s['reason']}" for s in result.get("skipped", [])]
    rec = f"**{(result.get('recommendation') or {}).get('line', '')}**"
    return "\n".join([head, *skipped]), rec, *_images(result), rows(result)
