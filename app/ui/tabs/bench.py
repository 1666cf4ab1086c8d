"""Benchmark tab (the Pair lab): sweep drafts × K on this machine, see the plots, use the recommendation,
browse / compare / delete past runs and export a report. Endpoint ``/tune`` (gradio_client) returns the
sweep's JSON: ``cells``, ``best``, ``recommendations``, ``partial``, ``run_id``, ``files``.

``layout`` places the components, ``wire`` connects their events to the module-level handlers below it."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import gradio as gr

from app.engine import limits
from app.lab.prompts import CATEGORIES, FIM
from app.lab.history import History
from app.lab.lab import LabRequest, discover, plan, run_lab, tuned_settings
from app.lab.result import SweepResult
from app.lab import eta
from app.lab.report import compare_markdown, k_label
from app.lab.tuned import describe_machine, load_tuned, machine_info, save_tuned
from app.service.faster import use_draft
from app.service.state import Activity, session_key
from app.ui import files
from app.ui.api import disk_words, refused
from app.ui.tabs import sizes
from app.ui.tabs.benchview import CELL_HEADERS, RUN_HEADERS, cells_rows, history_rows, lab_glossary_html, \
    latest_ids, latest_md, latest_result, quick_md, recommendation_md, running_words
from app.ui.controls import GEN

# The suites offered: every category, and the editors' completion requests (a code model with FIM tokens only)
SUITES = [("all", "all"), *((c, c) for c in CATEGORIES), ("Code completion (FIM)", FIM)]


RUNNING = ("**A sweep is running** — its progress is shown above; the recommendation, the plots and the cells "
           "appear here when it ends (Cancel keeps what was measured so far).")


def _images(result: Optional[dict]) -> list:
    return files.plot_images(result, ("speedup_vs_k", "per_position", "measured_vs_predicted"))


def _categories(result: Optional[dict]) -> gr.Dropdown:
    cats = list(((result or {}).get("recommendations") or {}).keys())
    return gr.Dropdown(choices=cats, value=cats[0] if cats else None)


def render_result(result: Optional[dict], hist: History) -> tuple:
    """Values for (result state, status, recommendation, category, 3 plots, cells table, history table)."""
    head = ""
    if result:
        head = (f"Run #{result.get('run_id')}: {result.get('runs_done')}/{result.get('runs_total')} runs in "
                f"{result.get('duration_s')} s" + (" — **cancelled, partial**" if result.get("partial") else ""))
        if result.get("tuned"):
            head += ". Saved as this machine's defaults for Chat and Compare."
        elif (result.get("config") or {}).get("quick") and not result.get("partial"):
            head += (". A quick sweep does not change the saved defaults: press **Use this** to apply a choice, "
                     "or run a full sweep.")
    return (result, head, recommendation_md(result), _categories(result), *_images(result),
            cells_rows(result), history_rows(hist))


def apply_recommendation(state, result: Optional[dict], cat: Optional[str]) -> str:
    """"Use this": store the category's choice as this machine's tuned settings, make it the defaults of Chat
    and Compare, and load the recommended draft if another one is loaded. Returns a line for the user."""
    if not result or not result.get("recommendations"):
        return "Run a sweep first."
    cat = cat if cat in result["recommendations"] else "all"
    settings = tuned_settings(SweepResult.from_dict(result), cat)
    if state.pair_id:
        save_tuned(state.pair_id, settings)
    state.apply_defaults(settings)
    note = use_draft(state, settings)
    rec = result["recommendations"][cat]
    return (f"Chat and Compare now use {rec['draft']}, K={k_label(rec)}"
            f"{'' if settings['speculative'] else ' (speculation off: nothing beat plain decoding)'}, "
            f"saved as this machine's default.{note}")


def _cancel_key(request) -> str:
    """The stop switch of one browser session's sweep (Cancel in another tab or browser leaves it running)."""
    return "bench:" + session_key(request, "api")


def build(state):
    """The Benchmark tab; ``state`` is the app's AppState (pair, generation lock, defaults). Returns its
    components; ``applied``, a hidden number, changes whenever the defaults of Chat and Compare do ("Use this",
    a full sweep)."""
    tuned = load_tuned(state.pair_id)
    if tuned:  # what was tuned on this machine becomes the defaults of Chat and Compare
        state.apply_defaults(tuned)
    hist = Histories()
    view = layout(state, hist)
    wire(state, view, hist)
    view.hist = hist
    return view


def follow_outputs(view: SimpleNamespace) -> list:
    """What shows the loaded pair's figures (``follow_pair``'s outputs)."""
    return [view.current, view.status, view.recommendation, view.category, view.plot_k, view.plot_pos, view.plot_mp,
            view.cells, view.runs, view.quick_eta]


def follow_pair(state, view: SimpleNamespace) -> tuple:
    """Another pair was loaded: its latest sweep (or that it has none) in place of the previous pair's figures,
    and its quick-sweep estimate."""
    hist = view.hist()
    out = list(render_result(latest_result(state.pair_id, hist), hist))
    out[1:3] = ["", latest_md(state.pair_id, hist)]
    return (*out, quick_md(state, hist))


class Histories:
    """The stored runs, opened on first use."""

    def __init__(self) -> None:
        self._h: Optional[History] = None

    def __call__(self) -> History:
        if self._h is None:
            self._h = History()
        return self._h


def layout(state, hist: Histories) -> SimpleNamespace:
    """Place the components; returned by name for ``wire``."""
    gr.Markdown("### Pair lab: which draft and K are fastest on *this* machine\n"
                f"Measured here: {describe_machine(machine_info())}. Plain runs interleave with speculative ones; "
                "every figure is a median over the prompts (spread: min–max).")
    with gr.Row():
        drafts = gr.Textbox("all", label="Drafts", info="all (every installed compatible model + lookup), "
                            "or draft ids / file names and 'lookup', comma-separated", scale=3)
        ks = gr.Textbox("", label="K values", info="e.g. 1,2,4,8 or 1-12, 'auto' allowed; empty: default", scale=2)
        suite = gr.Dropdown(SUITES, value="all", label="Prompt suite", scale=1, elem_id="tdm-lab-suite")
    with gr.Row():
        max_tokens = gr.Number(None, label="Tokens per run", info="empty: 32 quick, 128 full", precision=0)
        temperature = gr.Slider(0.0, 1.5, value=0.0, step=0.05, label="Temperature")
        with gr.Column():
            quick = gr.Checkbox(True, label="Quick", elem_id="tdm-quick",
                                info="own draft + lookup, K 2,4,8, two short prompts, twice (the repeat range)")
            quick_eta = gr.Markdown(lambda: quick_md(state, hist()), elem_id="tdm-quick-eta")
    with gr.Row():
        run_btn = gr.Button("Run sweep", variant="primary")
        cancel_btn = gr.Button("Cancel", variant="stop")
        drafts_btn = gr.Button("List candidate drafts")
    status = gr.Markdown("", elem_id="tdm-bench-status")  # the sweep's progress bar is drawn here
    recommendation = gr.Markdown(lambda: latest_md(state.pair_id, hist()), elem_id="tdm-bench-recommendation")
    with gr.Row():
        category = gr.Dropdown([], label="Recommendation for", scale=2)
        use_btn = gr.Button("Use this", variant="secondary", scale=1)
    use_status = gr.Markdown("", elem_id="tdm-use-status")
    applied = gr.Number(0, visible=False, elem_id="tdm-applied")
    with gr.Row(elem_classes="tdm-plots"):  # two to a row: the legends stay readable (titles are in the images)
        plot_k = gr.Image(type="pil", interactive=False, show_label=False, elem_id="tdm-plot-k", min_width=420)
        plot_pos = gr.Image(type="pil", interactive=False, show_label=False, elem_id="tdm-plot-pos", min_width=420)
    with gr.Row(elem_classes="tdm-plots"):
        plot_mp = gr.Image(type="pil", interactive=False, show_label=False, elem_id="tdm-plot-mp", min_width=420)
        with gr.Column(min_width=320):
            gr.Markdown("#### What the columns mean")
            gr.HTML(lab_glossary_html(), elem_id="tdm-lab-glossary")
    cells = gr.Dataframe(headers=CELL_HEADERS, value=[], label="Cells (best first)", interactive=False,
                         elem_id="tdm-cells")
    size_view = sizes.layout()  # how big must the target be? (stand-in sizes)
    with gr.Accordion("Raw result (JSON)", open=False):
        result_json = gr.JSON(label="result")
    with gr.Accordion("History", open=True, elem_id="tdm-history"):
        runs = gr.Dataframe(headers=RUN_HEADERS, value=lambda: history_rows(hist()),  # read again on every open
                            label="Stored runs (newest first)", interactive=False, elem_id="tdm-runs")
        with gr.Row():
            run_a = gr.Textbox(lambda: latest_ids(hist())[0], label="Run A", elem_id="tdm-run-a",
                               placeholder="a run id from the table (none stored yet)")
            run_b = gr.Textbox(lambda: latest_ids(hist())[1], label="Run B (compare)", elem_id="tdm-run-b",
                               placeholder="a second run id")
            refresh_btn = gr.Button("Refresh")
            show_btn = gr.Button("Show A")
            compare_btn = gr.Button("Compare A and B")
            delete_btn = gr.Button("Delete A", variant="stop")
            export_btn = gr.Button("Export report of A")
        history_md = gr.Markdown("")
        report_file = gr.File(label="Report (Markdown + plots + CSV, zip)", interactive=False)
    current = gr.State(lambda: latest_result(state.pair_id, hist()))
    return SimpleNamespace(**{k: v for k, v in locals().items() if k != "hist"})


def wire(state, v: SimpleNamespace, hist: Histories) -> None:
    """Connect the events to the handlers below; the closures only hand over the state and keep Gradio's
    signatures (the API endpoint "tune" keeps its parameters; gr.Request and gr.Progress are injected)."""
    def on_tune(drafts: str, ks: str, suite: str, max_tokens, temperature: float, quick: bool,
                request: gr.Request, progress=gr.Progress()) -> dict:
        return tune(state, drafts, ks, suite, max_tokens, temperature, quick, request, progress)

    def on_render(result: Optional[dict]):
        return render_result(result, hist())

    def on_cancel(request: gr.Request):
        return cancel_sweep(state, request)

    def on_list():
        return list_drafts(state)

    def on_use(result: Optional[dict], cat: Optional[str], n):
        return use_this(state, result, cat, n)

    outputs = [v.current, v.status, v.recommendation, v.category, v.plot_k, v.plot_pos, v.plot_mp, v.cells, v.runs]
    v.run_btn.click(lambda: RUNNING, None, [v.recommendation], queue=False, show_progress="hidden",
                    api_visibility="private")  # "No result yet" goes at once, not when the sweep ends
    v.run_btn.click(on_tune, [v.drafts, v.ks, v.suite, v.max_tokens, v.temperature, v.quick], [v.result_json],
                    api_name="tune", show_progress_on=[v.status], **GEN) \
        .then(on_render, [v.result_json], outputs, api_visibility="private", show_progress="hidden") \
        .then(after_sweep, [v.result_json, v.applied], [v.applied], api_visibility="private",
              show_progress="hidden") \
        .then(lambda: (*latest_ids(hist()), quick_md(state, hist())), None, [v.run_a, v.run_b, v.quick_eta],
              api_visibility="private", show_progress="hidden")
    v.cancel_btn.click(on_cancel, None, [v.status], queue=False, api_visibility="private")
    v.drafts_btn.click(on_list, None, [v.status], api_visibility="private", **GEN)
    v.use_btn.click(on_use, [v.current, v.category, v.applied], [v.use_status, v.applied],
                    api_visibility="private", show_progress_on=[v.use_status])
    v.refresh_btn.click(lambda: (history_rows(hist()), *latest_ids(hist())), None, [v.runs, v.run_a, v.run_b],
                        api_visibility="private")
    v.show_btn.click(lambda a: show_run(hist, a), [v.run_a], outputs, api_visibility="private",
                     show_progress_on=[v.status])
    v.compare_btn.click(lambda a, b: compare_runs(hist, a, b), [v.run_a, v.run_b], [v.history_md],
                        api_visibility="private")
    v.delete_btn.click(lambda a: delete_run(hist, a), [v.run_a], [v.history_md, v.runs], api_visibility="private")
    v.export_btn.click(lambda a: export_run(hist, a), [v.run_a], [v.history_md, v.report_file],
                       api_visibility="private")
    sizes.wire(state, v.size_view, v, hist, history_rows)


# --- the handlers ---------------------------------------------------------------------------------------------

def tune(state, drafts: str, ks: str, suite: str, max_tokens, temperature: float, quick: bool, request: gr.Request,
         progress: gr.Progress) -> dict:
    """Sweep drafts × K on the loaded pair; returns cells, best, recommendations, partial, run_id, files."""
    if state.pair is None:
        raise refused("No pair is loaded: load one in Pair settings first.")
    if not state.generation_lock.acquire(timeout=1.0):
        raise refused("A generation is running; try again when it has finished.")
    cancel = state.stop_event(_cancel_key(request))  # a fresh switch; only this session's Cancel sets it
    try:
        progress(0.0, desc="planning the sweep (checking which installed models can draft)")
        try:
            req = LabRequest(drafts=str(drafts or "all").strip(), ks=str(ks or "").strip() or None,
                             suite=str(suite or "all"), max_tokens=_count(max_tokens),
                             temperature=float(temperature or 0.0), quick=bool(quick))
            cfg = plan(state.pair, req)
        except ValueError as exc:
            raise refused(str(exc)) from None

        expected = eta.words(eta.estimate(cfg.total_runs(), cfg.max_tokens,
                                          latest_result(state.pair_id, History()), state.baseline_tps()))
        started = time.monotonic()
        progress(0.0, desc=f"{cfg.total_runs()} runs: {expected}")

        def on_progress(done: int, total: int, what: str, left: Optional[float]) -> None:
            act.done, act.total, act.eta_s = done, total, act.eta_s if left is None else left
            progress((done, total), desc=f"{what} · {running_words(time.monotonic() - started, done, total)}",
                     unit="runs")

        # a Chat message waiting meanwhile names the sweep and its progress (state.waiting_for)
        sweep = Activity("the Benchmark tab's sweep", total=cfg.total_runs())
        with disk_words(), state.doing(sweep) as act:
            result = run_lab(state.pair, cfg, state.pair_id, progress=on_progress, cancel=cancel,
                             command=_command(req, state.pair_id), store_tuned=not req.quick)
        if result.tuned:  # a complete full sweep: the new defaults apply at once
            state.apply_defaults(result.tuned)
        return result.to_dict()  # the tab holds the JSON (gr.State, gr.JSON), as stored runs come
    finally:
        state.generation_lock.release()


def after_sweep(result: Optional[dict], n):
    return (n or 0) + 1 if result and result.get("tuned") else gr.update()


def cancel_sweep(state, request: gr.Request) -> str:
    state.request_stop(_cancel_key(request))
    return "Cancelling after the current run… the partial result is kept in the history."


def list_drafts(state) -> str:
    if state.pair is None:
        return "No pair is loaded."
    skipped: list = []
    found = discover(state.pair, lambda name, why: skipped.append(f"- {name}: {why}"))
    lines = ["Candidates: " + ", ".join([c.id for c in found] + ["lookup"])]
    if skipped:
        lines += ["", "Not compatible with the target:", *skipped]
    return "\n".join(lines)


def use_this(state, result: Optional[dict], cat: Optional[str], n):
    with disk_words():
        note = apply_recommendation(state, result, cat)
    return note, (n or 0) + 1 if result and result.get("recommendations") else gr.update()


def parse_id(value) -> Optional[int]:
    """A run id from the form ("3", "#3", 3); None for anything else."""
    text = str(value if value is not None else "").strip().lstrip("#")
    return int(text) if text.isdigit() else None


def show_run(hist: Histories, a):
    run = hist().get(parse_id(a)) if parse_id(a) else None
    if run is None:
        return (None, "No such run.", *render_result(None, hist())[2:])
    result = run["result"] or {"cells": [], "partial": True}
    out = list(render_result(result, hist()))
    out[1] = f"Run #{run['id']} ({run['status']}), {run['created_at']}, {run['machine_line']}"
    return tuple(out)


def compare_runs(hist: Histories, a, b):
    try:
        return compare_markdown(hist().compare(parse_id(a), parse_id(b)))
    except (KeyError, TypeError) as exc:
        return f"Cannot compare: {exc}"


def delete_run(hist: Histories, a):
    with disk_words():
        ok = parse_id(a) is not None and hist().delete(parse_id(a))
    return ("Deleted run #%s." % parse_id(a) if ok else "No such run."), history_rows(hist())


def export_run(hist: Histories, a):
    run = hist().get(parse_id(a)) if parse_id(a) else None
    if run is None or not run["artifacts"] or not Path(run["artifacts"]).is_dir():
        return "No report for that run.", None
    base = Path(tempfile.mkdtemp(prefix="tandem-report-")) / f"tandem-pairlab-run-{run['id']}"
    archive = shutil.make_archive(str(base), "zip", run["artifacts"])
    return f"Report of run #{run['id']}: report.md with the plots and cells.csv.", archive


def _count(value) -> Optional[int]:
    """Tokens per run from the form: None (the default) when empty or 0, else a checked whole number."""
    return None if value in (None, "", 0) else limits.form_int("max_tokens", value)


def _command(req: LabRequest, pair_id: Optional[str]) -> str:
    parts = ["python launcher.py tune"] + ([f"--pair {pair_id}"] if pair_id else [])
    if req.drafts != "all":
        parts.append(f"--drafts {req.drafts}")
    if req.ks:
        parts.append(f"--k {req.ks}")
    if req.suite != "all":
        parts.append(f"--suite {req.suite}")
    if req.max_tokens:
        parts.append(f"--max-tokens {req.max_tokens}")
    if req.temperature:
        parts.append(f"--temperature {req.temperature:g}")
    if req.quick:
        parts.append("--quick")
    return " ".join(parts)
