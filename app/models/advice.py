"""Label every catalog pair for a machine (fits on GPU / partial offload / CPU only / will not fit, with the
numbers) and recommend the best pair per use. Shapes come from the installed file's header, else from a header
already read from the Hub, else from the catalog's architecture figures — never from the network."""

from __future__ import annotations

from typing import Any, Optional

from app.models import fileops, fit, meta, remote
from app.models.catalog import Catalog, ModelEntry, load
from app.models.fit import FITS, Machine, ModelShape, Settings
from app.models.ggufheader import GGUFError
from app.models.provision import installed_pair, model_path

LABELS = {"gpu": "fits on GPU", "partial": "partial offload", "cpu": "CPU only", "no": "will not fit"}


def shape_of(entry: ModelEntry, cat: Catalog) -> Optional[ModelShape]:
    path = model_path(entry)
    m = None
    if fileops.is_done(path):
        try:
            m, _ = meta.read(path)
        except GGUFError:
            m = None
    elif entry.repo and (got := remote.cached_header(entry.repo, entry.file)) is not None:
        try:
            m = meta.model_meta(got.header, got.file_size)
        except GGUFError:
            m = None
    if m is not None:
        return shape_from_meta(entry.id, m)
    size = entry.size
    if size is None and entry.derive_from and entry.derive_from in cat.models:
        src = cat.models[entry.derive_from]
        size = _derived_size(src.size, src.quant, entry.ftype or "F32")
    if size is None:
        size = _params_size(entry.params, entry.quant)  # an estimate from the parameter count and the quant
    if not (size and entry.layers and entry.embd and entry.kv_heads and entry.head_dim and entry.vocab):
        return None
    attn = entry.attn_layers if entry.attn_layers is not None else -1
    state = entry.state_floats * (entry.layers - entry.nextn_layers - max(attn, 0)) * 4 if attn >= 0 else 0
    return ModelShape(entry.id, size, entry.layers, entry.embd, entry.kv_heads, entry.head_dim, entry.head_dim,
                      entry.vocab, entry.swa_window, entry.swa_layers, attn_layers=attn, state_bytes=state,
                      nextn_layers=entry.nextn_layers)


def shape_from_meta(name: str, m: meta.ModelMeta) -> ModelShape:
    return ModelShape(name, m.weights_bytes, m.n_layers, m.n_embd, m.n_head_kv, m.head_dim_k, m.head_dim_v,
                      m.n_vocab, m.sliding_window, m.swa_layers, attn_layers=m.attn_layers,
                      state_bytes=4 * m.state_floats, nextn_layers=m.nextn_layers)


def _params_size(params: str, quant: str) -> Optional[int]:
    """Bytes of ``params`` ("27B", "354M") weights at ``quant``'s bits per weight (llama.cpp's averages), or None."""
    from app.models.derive import _BITS

    bits = _BITS.get(quant.upper())
    if not params or bits is None or params[-1:].upper() not in ("B", "M"):
        return None
    try:
        n = float(params[:-1]) * (1e9 if params[-1].upper() == "B" else 1e6)
    except ValueError:
        return None
    return int(n * bits / 8)


def _derived_size(src_size: Optional[int], src_quant: str, ftype: str) -> Optional[int]:
    from app.models.derive import _BITS

    if not src_size:
        return None
    return int(src_size * _BITS.get(ftype, 16) / _BITS.get(src_quant, 5))


def label_pairs(cat: Optional[Catalog] = None, machine: Optional[Machine] = None,
                settings: Settings = Settings(), check_installed: bool = False) -> list[dict[str, Any]]:
    """One row per catalog pair. ``check_installed``: a pair whose two files are here and whose compatibility
    was never judged is judged now, from the local headers (no network), and the verdict is remembered."""
    from app.models import hardware
    from app.models.compat import known_verdict

    cat = cat or load()
    machine = machine or hardware.detect()
    rows = []
    for pair in cat.pairs.values():
        row: dict[str, Any] = {"pair": pair.id, "name": pair.name, "use": list(pair.use), "k": pair.k,
                               "target": pair.target, "draft": pair.draft, "offline": pair.offline}
        t, d = shape_of(cat.models[pair.target], cat), shape_of(cat.models[pair.draft], cat)
        row["installed"] = installed_pair(cat, pair) is not None
        if t is None or d is None:
            row.update(fit="unknown", label="unknown (no size figures)", estimated_bytes=None)
        else:
            p = fit.plan(t, d, machine, settings)
            row.update(fit=p.fit, label=LABELS[p.fit], estimated_bytes=p.total_bytes, gpu_bytes=p.gpu_bytes,
                       ram_bytes=p.ram_bytes, target_gpu_layers=p.target_gpu_layers,
                       draft_gpu_layers=p.draft_gpu_layers, target_layers=t.n_layers + 1, reason=p.reason,
                       target_weights=t.weights)
        verdict = known_verdict(pair.target, pair.draft)
        if verdict is None and check_installed and row["installed"]:
            verdict = _judge(pair.target, pair.draft, cat)
        row["compatible"] = None if verdict is None else verdict["ok"]
        row["compat_reason"] = "" if verdict is None else verdict["reason"]
        rows.append(row)
    return rows


def _judge(target: str, draft: str, cat: Catalog) -> Optional[dict[str, Any]]:
    """The verdict for two installed models from their local headers, or None if they cannot be read."""
    from app.models.compat import CompatError, check_pair

    try:
        v = check_pair(target, draft, cat, remember=True, offline=True)
    except CompatError:
        return None
    return {"ok": v.ok, "reason": v.reason}


def recommend(rows: list[dict[str, Any]], uses: tuple[str, ...] = ("code", "chat")) -> dict[str, Any]:
    """Best pair per use: on the GPU, the largest target; else the best partial offload (most target layers on
    the GPU, then the smaller total); else the smallest pair that runs on the CPU. Pairs known to be
    incompatible are never recommended; demo pairs only when nothing else runs."""
    best: dict[str, Any] = {}
    for use in uses:
        cands = [r for r in rows if use in r["use"] and r["fit"] in FITS[:3] and r.get("compatible") is not False]
        real = [r for r in cands if not r["offline"]] or cands
        if not real:
            best[use] = None
            continue

        def key(r: dict[str, Any]):
            rank = FITS.index(r["fit"])
            if r["fit"] == "gpu":
                return (rank, -r["target_weights"], r["estimated_bytes"])
            if r["fit"] == "partial":
                return (rank, -r["target_gpu_layers"] / r["target_layers"], r["estimated_bytes"])
            return (rank, r["estimated_bytes"], 0)

        best[use] = min(real, key=key)["pair"]
    return best
