"""Pair settings: choose target and draft, check compatibility, set offload/context/threads, load.

``layout`` places the components, ``wire`` connects their events to the handlers below it (module functions;
the wiring's closures only hand them the app state and the catalog's pairs)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import gradio as gr

from app import paths
from app.engine import limits
from app.engine.remote import rpc
from app.engine.llama.vocab import VocabInfo, check
from app.errors import ui_message
from app.models import heads, library, meta, offload
from app.models.compat import kind_refusal
from app.models.catalog import load as load_catalog
from app.service.baseline import warm_up
from app.service.loading import PairOptions, load_into
from app.service.state import AppState, backend_name
from app.ui import controls, panel

NO_DRAFT = "(none: prompt lookup only)"
NGL_CHOICES = ["auto", "all", "0"]


def workers_html(text: str) -> str:
    """What each RPC worker in ``text`` lends (devices, free memory), or why it cannot be used."""
    try:
        endpoints = rpc.parse_endpoints(text or "")
        if not endpoints:
            return panel.status_html("No workers: the target stays on this machine.", "info")
        lines = [w.line() for w in offload.workers(endpoints)]
    except (ValueError, rpc.RpcError) as exc:
        return panel.status_html(str(exc), "error")
    return panel.status_html("Ready: " + "; ".join(lines), "ok")


def installed_models() -> dict[str, str]:
    """{label: path} of the GGUF models on disk (the model library's list when it is available)."""
    found: dict[str, str] = {}
    for rec in library.installed(with_meta=False):  # catalog files and imported models
        p = Path(rec["path"])
        if p.suffix == ".gguf" and p.is_file():
            found[p.name] = str(p)
    root = paths.models_dir()
    for p in sorted(root.rglob("*.gguf")):
        if ".part" not in p.name and p.is_file():
            found.setdefault(str(p.relative_to(root)), str(p))
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


@dataclass(frozen=True)
class CatalogPair:
    """A catalog pair as the Catalog pair list offers it: its id (the value, as the CLI and the API spell it),
    its catalog name (which spells out the sizes an id abbreviates: smollm2-17b-135m is SmolLM2-1.7B) and its
    two files."""

    id: str
    name: str
    target_file: str
    draft_file: str


def catalog_pairs() -> dict[str, CatalogPair]:
    """{pair id: CatalogPair} for the catalog's pairs."""
    try:
        cat = load_catalog()
        return {p.id: CatalogPair(p.id, p.name, cat.models[p.target].file, cat.models[p.draft].file)
                for p in cat.pairs.values() if p.target in cat.models and p.draft in cat.models}
    except Exception:  # a broken catalog file: no catalog pairs to offer, the tab still works
        return {}


def _files_of(pair: CatalogPair, models: dict[str, str]) -> tuple[Optional[str], Optional[str]]:
    """The (target, draft) labels of ``pair``'s files among the installed ``models``, None where one is missing."""
    t = next((k for k, v in models.items() if Path(v).name == pair.target_file), None)
    d = next((k for k, v in models.items() if Path(v).name == pair.draft_file), None)
    return t, d


def preset_choices(pairs: dict[str, CatalogPair], models: dict[str, str]) -> list[tuple[str, str]]:
    """(label, pair id) for every catalog pair, the installed ones first, each marked installed or not."""
    def installed(p: CatalogPair) -> bool:
        return None not in _files_of(p, models)

    ordered = sorted(pairs.values(), key=lambda p: not installed(p))  # stable: the catalog's order within each
    return [(f"{p.id} — {p.name} · {'installed' if installed(p) else 'not installed'}", p.id) for p in ordered]


PRESET_INFO = ("Every catalog pair, marked installed or not: an installed one fills Target and Draft; fetch the "
               "others in the Models tab (Get, or Download from the Hub).")


def preset_update(state: AppState, pairs: dict[str, CatalogPair], models: dict[str, str], keep: bool = False,
                  value: Optional[str] = None) -> Any:
    """The Catalog pair list with fresh installed marks; its value the loaded pair's id (``keep``: as it is),
    and where the loaded pair is no catalog pair, the info line says so."""
    info = PRESET_INFO
    if not keep:
        value = state.pair_id if state.pair is not None and state.pair_id in pairs else None
        if state.pair is not None and value is None:
            info += " The loaded pair is not a catalog pair (its files were chosen below)."
    choices = preset_choices(pairs, models)
    if keep:
        return gr.update(choices=choices)
    return gr.update(choices=choices, value=value, info=info)


@functools.lru_cache(maxsize=16)
def _header(path: str, mtime: float) -> tuple[meta.ModelMeta, VocabInfo]:
    return meta.read(path)  # the model manager's GGUF header reader


def verdict(target: Optional[str], draft: Optional[str]) -> tuple[bool, str]:
    """(ok, message) judged from the GGUF metadata, the way llama.cpp judges a loaded pair."""
    if not target:
        return False, "Choose a target model."
    if not draft:
        return True, "No draft model: only the prompt-lookup proposer can speculate."
    try:
        tm, tv = _header(target, os.path.getmtime(target))
        dm, dv = _header(draft, os.path.getmtime(draft))
    except Exception as exc:  # an empty, truncated or corrupt file is never green
        return False, f"Refused: {ui_message(exc)}"
    c = check(tv, dv)
    if not c.ok:
        return False, f"Refused: {c.reason}"
    why = kind_refusal(tm, dm)  # the words `models check` says: an assistant or a head made for another target
    if why is not None:
        return False, f"Refused: {why}"
    head = heads.note(dm)
    return True, "Compatible: the vocabularies match." + (f" {head[0].upper()}{head[1:]}." if head else "")


def info_html(state: AppState) -> str:
    info = state.describe_pair()
    if not info["loaded"]:
        msg = info.get("error") or "No pair loaded."
        return panel.status_html(msg, "error" if info.get("error") else "info") + \
            f'<div class="tdm-note">Backend: {panel.esc(backend_name())}</div>'
    rows = [("Backend", info["backend"]), ("Pair", info.get("pair_id") or "custom"),
            ("Context", f"{info['n_ctx']} tokens"), ("Threads", str(info["threads"]))]
    for role in ("target", "draft"):
        m = info.get(role)
        if m:
            gpu = "all" if m["n_gpu_layers"] < 0 else str(m["n_gpu_layers"])
            rows.append((role.capitalize(), f"{m['file']} · {m['desc']} · {m['n_params'] / 1e6:.0f}M params · "
                                            f"weights {m['size_bytes'] / 2**20:.0f} MiB · GPU layers: {gpu}"))
        else:
            rows.append((role.capitalize(), "none"))
        if role == "target" and info.get("standin"):
            rows.append(("Stand-in", f"{info['standin']} (its text is the small model's; it measures a big "
                                     "target's cost, not a big target's acceptance)"))
    report = offload.gpu_report(state.pair.target, state.pair.draft, state.gpu_choice)
    rows += [("GPU", report["decision"] or f"loaded with {state.target_options.n_gpu_layers} target layers asked")]
    rows += [("Placed", line) for line in offload.report_lines(report)]
    rows += [("RPC worker", line) for line in getattr(state.gpu_choice, "workers", ())]
    body = "".join(f"<tr><td><b>{panel.esc(k)}</b></td><td>{panel.esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="tdm-pairinfo">{body}</table>'


def _label_for(path: Optional[str], models: dict[str, str]) -> Optional[str]:
    if not path:
        return None
    return next((k for k, v in models.items() if Path(v) == Path(path)), None)


@dataclass
class View:
    """The tab's components (``layout``), for the event wiring (``wire``)."""

    preset: Any
    refresh: Any
    target: Any
    draft: Any
    compat: Any
    t_ngl: Any
    d_ngl: Any
    ctx: Any
    threads: Any
    workers: Any
    check: Any
    workers_status: Any
    load_btn: Any
    status: Any
    info: Any
    gen: controls.Controls  # the generation settings Chat and Compare read
    gen_status: Any


def build(state: AppState) -> tuple[Any, Any, View]:
    """Returns (pair info component, the load event, the view) so the app can refresh its header after a load
    and hand the generation settings to Chat and Compare."""
    pairs = catalog_pairs()
    view = layout(state, pairs)
    return view.info, wire(state, view, pairs), view


def layout(state: AppState, pairs: dict[str, CatalogPair]) -> View:
    models = installed_models()
    preset_now = preset_update(state, pairs, models)
    with gr.Row():
        # the lists follow the models folder (page load, Rescan, and the Models tab's changes: ``follow``)
        preset = gr.Dropdown(choices=preset_now["choices"], value=preset_now["value"], label="Catalog pair",
                             scale=3, info=preset_now["info"], elem_id="tdm-preset")
        refresh = gr.Button("Rescan models", size="sm", scale=1)
    with gr.Row():
        # a custom value is allowed so that a name the list no longer has reaches Load pair, which says why
        target = gr.Dropdown(choices=list(models), value=_label_for(state.target_path, models), label="Target",
                             info="The model whose output you get.", elem_id="tdm-target", allow_custom_value=True)
        draft = gr.Dropdown(choices=[NO_DRAFT, *models], value=_label_for(state.draft_path, models) or NO_DRAFT,
                            label="Draft", info="A small model with the same tokenizer.", elem_id="tdm-draft",
                            allow_custom_value=True)
    loaded_ok = state.pair is not None and state.pair.draft is not None
    compat = gr.HTML(panel.status_html("Compatible: the loaded pair passed llama.cpp's vocabulary check.", "ok")
                     if loaded_ok else "", elem_id="tdm-verdict")
    with gr.Row():
        t_ngl = gr.Dropdown(choices=NGL_CHOICES, value=str(state.gpu_layers[0]), allow_custom_value=True,
                            label="Target GPU layers", info="auto: as many as fit beside the draft (0 without a "
                                                            "GPU); all; or a number.")
        d_ngl = gr.Dropdown(choices=NGL_CHOICES, value=str(state.gpu_layers[1]), allow_custom_value=True,
                            label="Draft GPU layers", info="auto: all of it when it fits (the draft goes first); "
                                                           "all; or a number.")
        ctx = gr.Number(value=state.target_options.n_ctx or 4096, precision=0, label="Context size",
                        elem_id="tdm-ctx", info=f"{controls.range_text('ctx')} tokens of prompt + reply the pair "
                                                f"can hold (e.g. 2048, 4096, 8192).")
        threads = gr.Number(value=state.target_options.n_threads, precision=0, label="Threads",
                            info="CPU threads; 0 = all physical cores.")
    with gr.Row():
        workers = gr.Textbox(value=", ".join(state.target_options.rpc), label="RPC workers", scale=4,
                             elem_id="tdm-rpc", placeholder="host:port, host:port (empty: this machine only)",
                             info="Split the target over other machines running `python launcher.py worker`; "
                                  "the draft stays here. The RPC protocol has no authentication: use it only on "
                                  "a network you trust.")
        check = gr.Button("Check workers", size="sm", scale=1)
    workers_status = gr.HTML("", elem_id="tdm-rpc-status")
    load_btn = gr.Button("Load pair", variant="primary", elem_id="tdm-load")
    status = gr.HTML("", elem_id="tdm-pair-status")
    info = gr.HTML(info_html(state), elem_id="tdm-pairinfo")
    gr.HTML('<h3 class="tdm-section">Generation settings</h3><div class="tdm-note">Chat and Compare both use '
            'these (each keeps only its own reply length, and Chat its speculation switch). A value out of range '
            'is refused, never changed.</div>')
    gen_status = gr.HTML("", elem_id="tdm-gen-status")  # above the fields, where a refusal is seen
    gen = controls.build_shared(state)
    return View(preset, refresh, target, draft, compat, t_ngl, d_ngl, ctx, threads, workers, check,
                workers_status, load_btn, status, info, gen, gen_status)


def wire(state: AppState, v: View, pairs: dict[str, CatalogPair]):
    """Connect the events; returns the load event."""
    def on_preset(pid):
        return fill_from_preset(pairs, pid)

    def on_load(t_label, d_label, tngl, dngl, n_ctx, n_threads, rpc_text, progress=gr.Progress()):
        return load_from_form(state, pairs, t_label, d_label, tngl, dngl, n_ctx, n_threads, rpc_text, progress)

    def on_rescan(t_label, d_label):
        return rescan(pairs, t_label, d_label)

    lists = [v.preset, v.target, v.draft]
    # the page (re)opens: the lists as the models folder is now (another process may have fetched a model)
    gr.on(None, lambda: page_lists(state, pairs), None, lists, api_visibility="private", queue=False,
          show_progress="hidden")
    v.preset.input(on_preset, [v.preset], [v.target, v.draft, v.compat], api_visibility="private",
                   show_progress="hidden")
    # one listener, the latest values, one at a time: filling both lists must not leave the first half's verdict
    gr.on([v.target.change, v.draft.change], check_choice, [v.target, v.draft], [v.compat],
          api_visibility="private", trigger_mode="always_last", concurrency_limit=1, show_progress="hidden")
    v.refresh.click(on_rescan, [v.target, v.draft], lists, api_visibility="private")
    v.check.click(workers_html, [v.workers], [v.workers_status], api_visibility="private")
    return v.load_btn.click(on_load, [v.target, v.draft, v.t_ngl, v.d_ngl, v.ctx, v.threads, v.workers],
                            [v.status, v.info, v.compat, v.preset], api_visibility="private",
                            concurrency_id="load", concurrency_limit=1, show_progress_on=[v.status])


def follow(v: View, installed: Any) -> None:
    """The lists follow the Models tab: whatever changes its installed table (Get, Download, Import, Delete,
    Derive, Refresh) rescans the models folder here too."""
    pairs = catalog_pairs()
    installed.change(lambda t, d: rescan(pairs, t, d), [v.target, v.draft], [v.preset, v.target, v.draft],
                     api_visibility="private", show_progress="hidden")


# --- the handlers ---------------------------------------------------------------------------------------------

def page_lists(state: AppState, pairs: dict[str, CatalogPair]) -> tuple:
    """The three lists as the page opens: the folder's models, the loaded pair chosen."""
    current = installed_models()
    return (preset_update(state, pairs, current),
            gr.update(choices=list(current), value=_label_for(state.target_path, current)),
            gr.update(choices=[NO_DRAFT, *current], value=_label_for(state.draft_path, current) or NO_DRAFT))


def rescan(pairs: dict[str, CatalogPair], t_label: Optional[str], d_label: Optional[str]) -> tuple:
    """The lists with the folder's models now; a chosen model that is gone is unchosen (which clears or
    recomputes the compatibility line), one still there stays chosen."""
    current = installed_models()
    t = gr.update(choices=list(current)) if not t_label or t_label in current else \
        gr.update(choices=list(current), value=None)
    d = gr.update(choices=[NO_DRAFT, *current]) if not d_label or d_label in current or d_label == NO_DRAFT else \
        gr.update(choices=[NO_DRAFT, *current], value=NO_DRAFT)
    return gr.update(choices=preset_choices(pairs, current)), t, d


def fill_from_preset(pairs: dict[str, CatalogPair], pid: Optional[str]) -> tuple:
    """Target and Draft from a catalog pair, with the lists rescanned so both its files are among the choices;
    a pair that is not installed says so on the compatibility line and changes nothing else."""
    if not pid or pid not in pairs:
        return gr.update(), gr.update(), gr.update()
    pair, current = pairs[pid], installed_models()
    t, d = _files_of(pair, current)
    if t is None or d is None:
        missing = [f for f, have in ((pair.target_file, t), (pair.draft_file, d)) if have is None]
        verb = "is" if len(missing) == 1 else "are"
        return gr.update(choices=list(current)), gr.update(choices=[NO_DRAFT, *current]), panel.status_html(
            f"{pid} is not installed: {' and '.join(missing)} {verb} not in the models folder. Fetch it in the "
            f"Models tab (Get), or run `python launcher.py models pull {pid}`.", "error")
    return gr.update(choices=list(current), value=t), gr.update(choices=[NO_DRAFT, *current], value=d), gr.update()


def _missing(role: str, label: str) -> str:
    return (f"the {role} {label} is not in the models folder ({paths.models_dir()}) any more: press Rescan "
            "models, or fetch it again in the Models tab")


def check_choice(t_label: str, d_label: str) -> str:
    current = installed_models()
    for role, label in (("target", t_label), ("draft", d_label)):
        if label and label != NO_DRAFT and label not in current:
            return panel.status_html(_missing(role, label).capitalize() + ".", "error")
    ok, msg = verdict(current.get(t_label), current.get(d_label) if d_label != NO_DRAFT else None)
    return panel.status_html(msg, "ok" if ok else "error")


def load_from_form(state: AppState, pairs: dict[str, CatalogPair], t_label, d_label, tngl, dngl, n_ctx,
                   n_threads, rpc_text, progress) -> tuple[str, str, str, Any]:
    """Load the pair the form describes (the previous one stays if this fails); (status, pair info, the
    compatibility line judged again, the Catalog pair list showing the loaded pair)."""
    current = installed_models()
    tpath = current.get(t_label)
    dpath = current.get(d_label) if d_label and d_label != NO_DRAFT else None
    if not t_label:
        return panel.status_html("Choose a target model.", "error"), info_html(state), "", gr.update()
    for role, label, path in (("target", t_label, tpath), ("draft", d_label, dpath)):
        if label and label != NO_DRAFT and path is None:
            kept = " The previous pair is still loaded." if state.pair is not None else ""
            return (panel.status_html(f"Could not load: {_missing(role, label)}.{kept}", "error"), info_html(state),
                    "", gr.update())
    compat = check_choice(t_label, d_label or NO_DRAFT)
    before = state.pair
    try:
        n_ctx = limits.form_int("context size", n_ctx, "ctx")
        n_threads = limits.form_int("threads", n_threads or 0)
        want = (offload.layers_value(tngl), offload.layers_value(dngl))
        endpoints = rpc.parse_endpoints(rpc_text or "")
        preset_id = next((p.id for p in pairs.values()
                          if Path(tpath).name == p.target_file and dpath and Path(dpath).name == p.draft_file), None)
        line = load_into(state, PairOptions(tpath, dpath, want, int(n_ctx), int(n_threads or 0), endpoints),
                         preset_id, progress=lambda f, d: progress(f, desc=d))
        progress(0.95, desc="warming up")
        warm_up(state)
    except Exception as exc:  # the previous pair stays loaded, unless the new one loaded and then failed
        state.load_error = ui_message(exc)
        kept = (" The previous pair is still loaded." if state.pair is not None and state.pair is before
                else " The new pair loaded but failed its first tokens." if state.pair is not None else "")
        return (panel.status_html(f"Could not load {Path(tpath).name}: {state.load_error}.{kept}", "error"),
                info_html(state), compat, gr.update())
    return (panel.status_html(f"Loaded. {line}", "ok"), info_html(state), compat,
            preset_update(state, pairs, current))
