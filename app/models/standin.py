"""Stand-in targets: a real model's exact text at a bigger model's cost.

Speculation pays when a target step is expensive next to a draft step; the demo targets (135M, 270M) are so
cheap on a GPU that a draft token costs about a target step, and the pairs speculation is for (7B-32B targets)
are gigabytes that a test run or a lent machine cannot carry. A stand-in is the source model widened by an
integer factor f with zero weights (``widen.py`` has the tensor rules): it loads as an ordinary model of
f² times the source's layer weights, costs what such a model costs per token, and writes the source's text.

Why the text is the source's, exactly:

* the residual stream (width f·n) holds f copies of the source's vector: the embedding's columns are copied, and
  every tensor that writes into the stream (attn_output, ffn_down) has its rows copied, so each layer adds the
  same update to every copy;
* an RMSNorm over f copies sees the source's mean square, so it needs no new weights or epsilon: its weights
  are the source's on the first copy and zero on the others, and whatever reads the normalised vector (q, k, v,
  gate, up, the output head) reads the first copy only (zero columns elsewhere);
* the extra attention heads (f·n_head query and f·n_head_kv key/value heads of the same head_dim, after the
  source's) have zero q, k and v: uniform attention over zero values, and attn_output's columns for them are
  zero; the extra FFN rows have zero gate and up (silu(0)·0 = 0) and zero ffn_down columns.

Every product is the source's plus exact zeros and no weight is rescaled, so on the CPU the logits are the
source's to the bit for any factor (the norm's sum of squares over f copies is accumulated in double precision);
tests/models/test_standin.py measures it. (Zero-padding the stream instead needs the norm weights times
sqrt(1/f), which rounds unless f is a power of 4: x2 then moved logits by up to 0.026.)

Architectures: ``llama`` (SmolLM2, Llama, Mistral-style files) and ``qwen2`` (its q/k/v biases padded with zeros).
Others are refused with the reason (:data:`REFUSED`), unknown ones because the construction was not checked
for them. The text being the source's also means a stand-in measures a big model's *cost*, not a big model's
acceptance: a real 1.8B target would disagree with the 135M draft more often.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from gguf import GGUFValueType

from app import paths
from app.engine.errors import TandemError
from app.models import fileops, fit, ggufheader, widen
from app.models.catalog import ModelEntry
from app.models.fileops import Progress

SUPPORTED = ("llama", "qwen2")
_GEMMA = ("scales the token embeddings by sqrt(n_embd) before the first layer: the wider model would scale them "
          "by sqrt(f·n_embd), which changes every logit")
REFUSED = {
    "gemma": _GEMMA, "gemma2": _GEMMA, "gemma3": _GEMMA, "gemma3n": _GEMMA, "gemma-embedding": _GEMMA,
    "qwen3": "has per-head q/k norms, which the construction would keep as they are (per head_dim), but no "
             "test model here covers it yet",
}
FACTORS = range(2, 65)  # x1 is the source itself
DIRECT = ("F32", "F16")  # written directly; another type goes through an F16 stand-in (derive.quantize)
KEY_SOURCE, KEY_FACTOR, KEY_SOURCE_PARAMS = "tandem.standin.source", "tandem.standin.factor", \
    "tandem.standin.source_params"
CTX = 4096  # the context the memory figure assumes (the app's default for a target)


class StandinError(TandemError, ValueError):
    hint = "stand-ins are made from llama or qwen2 models in F32, F16 or a quantized type llama.cpp reads"


@dataclass(frozen=True)
class Estimate:
    """What a stand-in of ``factor`` will be, from the source's header alone (nothing written)."""

    factor: int
    ftype: str
    arch: str
    params: int
    source_params: int
    file_bytes: int  # on disk when done (F32/F16: to within a few bytes of header)
    disk_bytes: int  # the most disk the derive takes at once (a quantized stand-in goes through an F16 one)
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int

    @property
    def params_label(self) -> str:
        return params_label(self.params)

    def shape(self, name: str = "stand-in") -> fit.ModelShape:
        return fit.ModelShape(name, self.file_bytes, self.n_layers, self.n_embd, self.n_head_kv, self.head_dim,
                              self.head_dim, self.n_vocab)

    def memory_bytes(self, ctx: int = CTX) -> int:
        """Weights, KV cache at ``ctx`` and compute buffer, as the memory estimate counts them (``fit``)."""
        return fit.parts(self.shape(), ctx).total

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), params_label=self.params_label, memory_bytes=self.memory_bytes())


def params_label(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def check_source(header: ggufheader.Header) -> str:
    """The architecture, if a stand-in can be made from this header; else StandinError with the reason."""
    arch = header.text("general.architecture", "unknown")
    if arch in REFUSED:
        raise StandinError(f"a stand-in cannot be made from a {arch} model: {arch} {REFUSED[arch]}")
    if arch not in SUPPORTED:
        raise StandinError(f"a stand-in cannot be made from a {arch} model: the construction is checked for "
                           f"{' and '.join(SUPPORTED)} only")
    try:
        for t in header.tensors:
            widen.rule_for(t)
    except widen.WidenError as exc:
        raise StandinError(f"a stand-in cannot be made from this {arch} model: {exc}") from None
    return arch


def estimate(source: Path | str, factor: int, ftype: str = "F32") -> Estimate:
    """Size, parameters and shape of a stand-in of ``source`` widened ``factor`` times (reads the header only)."""
    return _estimate(_header(Path(source)), factor, ftype)


def _estimate(header: ggufheader.Header, factor: int, ftype: str) -> Estimate:
    from app.models.derive import _BITS, FTYPES

    _check_factor(factor)
    if ftype not in FTYPES:
        raise StandinError(f"unknown type {ftype!r}; choose F32, F16 or a type llama.cpp quantizes to "
                           f"({', '.join(FTYPES)})")
    arch = check_source(header)

    def num(key: str, default: int = 0) -> int:
        return header.integers(f"{arch}.{key}", default)

    n_embd, n_head = num("embedding_length"), num("attention.head_count")
    head_dim = num("attention.key_length", n_embd // n_head if n_head else 0)
    params = sum(math.prod(widen.widened_shape(t, factor)) for t in header.tensors)
    direct = ftype if ftype in DIRECT else "F16"
    written = header.data_offset + widen.data_bytes(header, factor, direct)
    file_bytes = written if ftype in DIRECT else int(params * _BITS[ftype] / 8) + header.data_offset
    return Estimate(factor, ftype, arch, params, sum(t.n_elements for t in header.tensors), file_bytes,
                    written if ftype in DIRECT else written + file_bytes, num("block_count"), n_embd * factor,
                    n_head * factor, num("attention.head_count_kv", n_head) * factor, head_dim,
                    num("feed_forward_length") * factor, len(header.strings("tokenizer.ggml.tokens")))


def factor_for(source: Path | str, params: Optional[float] = None, gib: Optional[float] = None,
               ftype: str = "F32") -> int:
    """The factor for "at least ``params`` parameters" (the smallest that reaches it) or "fits in ``gib`` GiB on
    disk" (the largest that fits); exactly one of the two."""
    if (params is None) == (gib is None):
        raise StandinError("give the stand-in's size as parameters or as GiB, not both or neither")
    header = _header(Path(source))
    sizes = [_estimate(header, f, ftype) for f in FACTORS]
    if params is not None:
        reaching = [e.factor for e in sizes if e.params >= params]
        if not reaching:
            raise StandinError(f"{params / 1e9:.1f}B parameters is beyond x{FACTORS[-1]} of this model")
        return reaching[0]
    assert gib is not None
    fitting = [e.factor for e in sizes if e.file_bytes <= gib * 2**30]
    if not fitting:
        raise StandinError(f"no stand-in fits in {gib:g} GiB: the smallest (x2) takes "
                           f"{sizes[0].file_bytes / 2**30:.2f} GiB")
    return fitting[-1]


def default_path(source: Path, factor: int, ftype: str) -> Path:
    return paths.models_dir() / f"{source.stem}.standin-x{factor}.{ftype}.gguf"


def derive(source: Path | str, factor: int, dest: Optional[Path] = None, ftype: str = "F32",
           name: Optional[str] = None, progress: Optional[Progress] = None,
           cancel: Optional[threading.Event] = None) -> Path:
    """Write the stand-in of ``source`` widened ``factor`` times at ``dest`` and return its path: streamed
    tensor by tensor, to ``dest.part`` renamed when whole, with a checksum manifest (instant when already done).
    ``name`` names the source in the file (default: its ``general.name``); memory is not checked here (a
    stand-in may be made for another machine), disk space is."""
    from app.models.derive import quantize

    source = Path(source)
    est = estimate(source, factor, ftype)
    dest = Path(dest) if dest is not None else default_path(source, factor, ftype)
    if fileops.is_done(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fileops.check_free_space(dest.parent, est.disk_bytes, what=f"for the stand-in x{factor} of {source.name}")
    if ftype not in DIRECT:
        middle = dest.with_name(dest.name + ".f16.gguf")
        derive(source, factor, middle, "F16", name, progress, cancel)
        try:
            quantize(middle, dest, ftype, progress=progress, n_params=est.params)
        finally:
            middle.unlink(missing_ok=True)
            fileops.manifest_path(middle).unlink(missing_ok=True)
        return dest
    header = _header(source)
    label = name or _display(header.text("general.name")) or source.stem
    extra = {
        "general.name": (f"{label} stand-in x{factor}", GGUFValueType.STRING),
        "general.size_label": (est.params_label, GGUFValueType.STRING),
        "general.file_type": (0 if ftype == "F32" else 1, GGUFValueType.UINT32),
        KEY_SOURCE: (label, GGUFValueType.STRING),
        KEY_FACTOR: (factor, GGUFValueType.UINT32),
        KEY_SOURCE_PARAMS: (est.source_params, GGUFValueType.UINT64),
    }
    started = time.monotonic()
    with fileops.atomic_output(dest) as tmp:
        total = est.file_bytes - header.data_offset
        with fileops.ProgressBar(f"deriving {dest.name} (x{factor}, {est.params_label})", total, progress) as bar:
            digest = widen.write(source, header, tmp, factor, ftype, extra, bar.update, cancel)
    print(f"[tandem] derived {dest.name} ({est.params_label} parameters, {dest.stat().st_size / 1e9:.2f} GB) in "
          f"{time.monotonic() - started:.1f}s", flush=True)
    fileops.mark_done(dest, digest)
    return dest


def derive_installed(ref: str, factor: int, ftype: str = "F32", progress: Optional[Progress] = None,
                     cancel: Optional[threading.Event] = None) -> dict[str, Any]:
    """The stand-in of an installed model (id or path), registered in the library with its source as parent; a
    catalog model names it as ``provision`` does."""
    from app.models import library
    from app.models.catalog import load

    rec = library.find(ref)
    if rec is None:
        raise StandinError(f"{ref!r} is not an installed model or a .gguf file")
    cat = load()
    source, entry = Path(rec["path"]), cat.models.get(rec["id"])
    listed = [m for m in cat.models.values() if (m.derive_from, m.widen, m.ftype) == (rec["id"], factor, ftype)]
    if listed:  # the catalog's own stand-in: its file, never a second copy, and no record of its own
        dest = provision(listed[0], entry or listed[0], source, paths.models_dir() / listed[0].file, progress, cancel)
        model_id = listed[0].id
    else:
        dest = derive(source, factor, default_path(source, factor, ftype), ftype, progress=progress, cancel=cancel)
        model_id = library.slug(dest.stem)
    found = info(dest)
    assert found is not None
    if not listed:
        library.register(model_id, dest, "derived", parent=rec["id"], ftype=ftype,
                         name=f"{found.source} stand-in x{factor}")
    return {"id": model_id, "path": str(dest), "parent": rec["id"], **found.to_dict()}


def provision(entry: ModelEntry, source_entry: ModelEntry, source: Path, dest: Path,
              progress: Optional[Progress] = None, cancel: Optional[threading.Event] = None) -> Path:
    """Derive a catalog stand-in (``widen`` set): say what it takes before writing, and refuse with the figures
    when this machine could not run it. The file names its source by the source entry's model name (the catalog
    names models "<model> <quant> (…)": "SmolLM2-135M-Instruct F32 (derived)" gives "SmolLM2-135M-Instruct")."""
    if fileops.is_done(dest):
        return dest
    assert entry.widen is not None
    est = estimate(source, entry.widen, entry.ftype or "F32")
    need, have, where = est.memory_bytes(), *_memory_here()
    print(f"[tandem] {entry.id}: x{est.factor} of {source.name}, {est.params_label} parameters: "
          f"{est.file_bytes / 1e9:.2f} GB on disk, about {need / 2**30:.1f} GiB of memory to run "
          f"({have / 2**30:.1f} GiB {where} here)", flush=True)
    if need > have:
        kv = fit.kv_bytes(est.shape(), CTX)
        raise StandinError(f"{entry.id} would need about {need / 2**30:.1f} GiB of memory to run (weights "
                           f"{est.file_bytes / 2**30:.1f} GiB, KV cache {kv / 2**30:.1f} GiB at {CTX} tokens) and "
                           f"{have / 2**30:.1f} GiB is {where} here: not derived ({est.file_bytes / 1e9:.1f} GB "
                           "would have been written for nothing); a smaller factor fits")
    return derive(source, entry.widen, dest, entry.ftype or "F32", name=source_entry.name.split(" ")[0],
                  progress=progress, cancel=cancel)


def needs(entry: ModelEntry) -> Optional[str]:
    """What a catalog stand-in takes, from the catalog's own figures (shown before it is fetched), or None for
    any other entry: "derives 7.25 GB, about 7.2 GiB of memory to run"."""
    e = entry
    if not (e.widen and e.size and e.layers and e.embd and e.kv_heads and e.head_dim and e.vocab):
        return None
    shape = fit.ModelShape(e.id, e.size, e.layers, e.embd, e.kv_heads, e.head_dim, e.head_dim, e.vocab)
    return f"derives {e.size / 1e9:.2f} GB, about {fit.parts(shape, CTX).total / 2**30:.1f} GiB of memory to run"


def _memory_here() -> tuple[int, str]:
    """Memory a model could use on this machine: available RAM plus usable GPU memory (where it is its own)."""
    from app.models import hardware

    machine = hardware.detect()
    gpu = 0 if machine.unified else fit.gpu_budget(machine)
    return machine.ram_available + gpu, "available (RAM and GPU)" if gpu else "of RAM available"


@dataclass(frozen=True)
class Info:
    """What a stand-in file says about itself."""

    source: str
    factor: int
    params: int
    source_params: int

    @property
    def caption(self) -> str:
        return f"stand-in: {self.source}'s text at the cost of a {params_label(self.params)} model"

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), caption=self.caption)


_infos: dict[tuple[str, int, int], Optional[Info]] = {}
_lock = threading.Lock()


def info(path: Path | str) -> Optional[Info]:
    """The stand-in facts of a GGUF file, or None for any other file (or one that cannot be read): cached per
    path, size and modification time, so every display can ask."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _infos:
            return _infos[key]
    try:
        header = ggufheader.read_file(path)
        factor = header.integer(KEY_FACTOR)
        found = None if factor is None else Info(header.text(KEY_SOURCE, path.stem), factor,
                                                 sum(t.n_elements for t in header.tensors),
                                                 header.integer(KEY_SOURCE_PARAMS, 0))
    except (OSError, ggufheader.GGUFError):
        found = None
    with _lock:
        if len(_infos) > 64:
            _infos.clear()
        _infos[key] = found
    return found


def caption(path: Path | str | None) -> Optional[str]:
    """"stand-in: SmolLM2-135M-Instruct's text at the cost of a 1.8B model" for a stand-in file, else None."""
    found = info(path) if path else None
    return found.caption if found else None


def _check_factor(factor: int) -> None:
    if isinstance(factor, bool) or not isinstance(factor, int) or factor not in FACTORS:
        raise StandinError(f"the factor must be a whole number from {FACTORS[0]} to {FACTORS[-1]} (got {factor!r}); "
                           "x1 is the source itself")


def _header(source: Path) -> ggufheader.Header:
    try:
        header = ggufheader.read_file(source)
        ggufheader.check_layout(header, source.stat().st_size)
    except OSError as exc:
        raise StandinError(f"cannot read {source}: {exc.strerror or exc}") from None
    return header


def _display(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""
