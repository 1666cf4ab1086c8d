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
from app.models import library, meta, offload
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


def catalog_pairs() -> dict[str, tuple[str, str, str]]:
    """{label: (pair id, target file, draft file)} for catalog pairs."""
    try:
        cat = load_catalog()
        return {f"{p.name} ({p.id})": (p.id, cat.models[p.target].file, cat.models[p.draft].file)
                for p in cat.pairs.values() if p.target in cat.models and p.draft in cat.models}
    except Exception:  # a broken catalog file: no catalog pairs to offer, the tab still works
        return {}


@functools.lru_cache(maxsize=16)
def _vocab(path: str, mtime: float) -> VocabInfo:
    return meta.read(path)[1]  # the model manager's GGUF header reader


def verdict(target: Optional[str], draft: Optional[str]) -> tuple[bool, str]:
    """(ok, message) judged from the GGUF metadata, the way llama.cpp judges a loaded pair."""
    if not target:
        return False, "Choose a target model."
    if not draft:
        return True, "No draft model: only the prompt-lookup proposer can speculate."
    try:
        t = _vocab(target, os.path.getmtime(target))
        d = _vocab(draft, os.path.getmtime(draft))
    except Exception as exc:  # an empty, truncated or corrupt file is never green
        return False, f"Refused: {ui_message(exc)}"
    c = check(t, d)
    return (True, "Compatible: the vocabularies match.") if c.ok else (False, f"Refused: {c.reason}")


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


def layout(state: AppState, pairs: dict[str, tuple[str, str, str]]) -> View:
    models = installed_models()
    with gr.Row():
        preset = gr.Dropdown(choices=list(pairs), value=None, label="Catalog pair", scale=3,
                             info="Fill target and draft from a catalog pair (installed models only).")
        refresh = gr.Button("Rescan models", size="sm", scale=1)
    with gr.Row():
        target = gr.Dropdown(choices=list(models), value=_label_for(state.target_path, models), label="Target",
                             info="The model whose output you get.", elem_id="tdm-target")
        draft = gr.Dropdown(choices=[NO_DRAFT, *models], value=_label_for(state.draft_path, models) or NO_DRAFT,
                            label="Draft", info="A small model with the same tokenizer.", elem_id="tdm-draft")
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


def wire(state: AppState, v: View, pairs: dict[str, tuple[str, str, str]]):
    """Connect the events; returns the load event."""
    def on_preset(label):
        return fill_from_preset(pairs, label)

    def on_load(t_label, d_label, tngl, dngl, n_ctx, n_threads, rpc_text, progress=gr.Progress()):
        return load_from_form(state, pairs, t_label, d_label, tngl, dngl, n_ctx, n_threads, rpc_text, progress)

    v.preset.change(on_preset, [v.preset], [v.target, v.draft], api_visibility="private")
    v.target.change(check_choice, [v.target, v.draft], [v.compat], api_visibility="private")
    v.draft.change(check_choice, [v.target, v.draft], [v.compat], api_visibility="private")
    v.refresh.click(rescan, None, [v.target, v.draft], api_visibility="private")
    v.check.click(workers_html, [v.workers], [v.workers_status], api_visibility="private")
    return v.load_btn.click(on_load, [v.target, v.draft, v.t_ngl, v.d_ngl, v.ctx, v.threads, v.workers],
                            [v.status, v.info], api_visibility="private", concurrency_id="load",
                            concurrency_limit=1, show_progress_on=[v.status])


# --- the handlers ---------------------------------------------------------------------------------------------

def fill_from_preset(pairs: dict[str, tuple[str, str, str]], label: str) -> tuple:
    if label not in pairs:
        return gr.update(), gr.update()
    pid, tfile, dfile = pairs[label]
    current = installed_models()
    t = next((k for k, v in current.items() if Path(v).name == tfile), None)
    d = next((k for k, v in current.items() if Path(v).name == dfile), None)
    if t is None or d is None:
        gr.Warning(f"{label}: not installed yet (Get it in the Models tab, or `launcher.py models pull {pid}`).")
        return gr.update(), gr.update()
    return gr.update(value=t), gr.update(value=d)


def check_choice(t_label: str, d_label: str) -> str:
    current = installed_models()
    ok, msg = verdict(current.get(t_label), current.get(d_label) if d_label != NO_DRAFT else None)
    return panel.status_html(msg, "ok" if ok else "error")


def rescan() -> tuple:
    current = installed_models()
    return gr.update(choices=list(current)), gr.update(choices=[NO_DRAFT, *current])


def load_from_form(state: AppState, pairs: dict[str, tuple[str, str, str]], t_label, d_label, tngl, dngl, n_ctx,
                   n_threads, rpc_text, progress) -> tuple[str, str]:
    """Load the pair the form describes (the previous one stays if this fails); (status, pair info)."""
    current = installed_models()
    tpath = current.get(t_label)
    dpath = current.get(d_label) if d_label and d_label != NO_DRAFT else None
    if not tpath:
        return panel.status_html("Choose a target model.", "error"), info_html(state)
    before = state.pair
    try:
        n_ctx = limits.form_int("context size", n_ctx, "ctx")
        n_threads = limits.form_int("threads", n_threads or 0)
        want = (offload.layers_value(tngl), offload.layers_value(dngl))
        endpoints = rpc.parse_endpoints(rpc_text or "")
        preset_id = next((pid for pid, tf, df in pairs.values()
                          if Path(tpath).name == tf and dpath and Path(dpath).name == df), None)
        line = load_into(state, PairOptions(tpath, dpath, want, int(n_ctx), int(n_threads or 0), endpoints),
                         preset_id, progress=lambda f, d: progress(f, desc=d))
        progress(0.95, desc="warming up")
        warm_up(state)
    except Exception as exc:  # the previous pair stays loaded, unless the new one loaded and then failed
        state.load_error = ui_message(exc)
        kept = (" The previous pair is still loaded." if state.pair is not None and state.pair is before
                else " The new pair loaded but failed its first tokens." if state.pair is not None else "")
        return panel.status_html(f"Could not load: {state.load_error}.{kept}", "error"), info_html(state)
    return panel.status_html(f"Loaded. {line}", "ok"), info_html(state)
