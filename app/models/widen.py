"""The tensor rules and the streaming writer behind stand-in targets (``standin.py`` is the public side).

A stand-in widens every hidden dimension of a llama-style model by an integer factor f so that the wide model
computes exactly what the source computes (``standin``'s docstring says why). Each dimension of a tensor (numpy
order: rows, columns; ggml's ``ne1, ne0``) is *kept*, *zero-padded* (times f: the source's values first, zeros
after) or *copied* (times f: the source's values f times over):

===============================  ==========  ==========  ==========================================================
tensor                           rows        columns     why
===============================  ==========  ==========  ==========================================================
token_embd                       kept        copies      the residual stream starts as f copies of the source's
attn_output, ffn_down            copies      zeros       what a layer adds is added to every copy; extra heads and
                                                         FFN rows (zero) add nothing
attn_output bias                 copies
attn_q/k/v, ffn_gate/up          zeros       zeros       read the first copy only; whole extra heads / FFN rows
attn_q/k/v bias                  zeros                   the extra heads' biases are zero too
attn_norm, ffn_norm, output_norm zeros                   the mean square over f copies is the source's, so the
                                                         normalised first copy is the source's; the rest is zeroed
output                           kept        zeros       reads the first copy (a tied output reads token_embd's
                                                         copies through output_norm's zeros)
rope_freqs                       kept                    per head_dim: heads keep their size
===============================  ==========  ==========  ==========================================================

Padding in whole heads at the end keeps llama.cpp's rope permutation (it reorders rows *within* each head) and
the grouped-query mapping (query head i reads key/value head i // (n_head / n_head_kv); the source's heads keep
their indices and the ratio is unchanged). Anything else in a file is refused by name, never guessed at.

The writer streams: it reads the source in row chunks (``os.pread``, not a memory map, so pages read are not
kept as the process's memory), writes each widened chunk, then the copied or zero rows, and hashes every byte as
it goes (no second pass over a file of many GB). Memory stays near ``CHUNK`` whatever the model's size.
"""

from __future__ import annotations

import enum
import hashlib
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

from app.engine.errors import TandemError
from app.models.ggufheader import Header, TensorInfo

CHUNK = 16 << 20  # bytes of output per write


class Dim(enum.Enum):
    KEPT = "kept"
    ZEROS = "zero-padded"
    COPIES = "copied"


@dataclass(frozen=True)
class Rule:
    dims: tuple[Dim, ...]  # numpy order (rows, columns); one entry for a 1-D tensor


K, Z, C = Dim.KEPT, Dim.ZEROS, Dim.COPIES
_READ, _WRITE, _NORM = Rule((Z, Z)), Rule((C, Z)), Rule((Z,))
RULES: dict[str, Rule] = {
    "token_embd.weight": Rule((K, C)), "output.weight": Rule((K, Z)), "rope_freqs.weight": Rule((K,)),
    "output_norm.weight": _NORM, "attn_norm.weight": _NORM, "ffn_norm.weight": _NORM,
    "attn_q.weight": _READ, "attn_k.weight": _READ, "attn_v.weight": _READ, "attn_output.weight": _WRITE,
    "attn_q.bias": Rule((Z,)), "attn_k.bias": Rule((Z,)), "attn_v.bias": Rule((Z,)), "attn_output.bias": Rule((C,)),
    "ffn_gate.weight": _READ, "ffn_up.weight": _READ, "ffn_down.weight": _WRITE,
}
# Hyperparameters (``<arch>.<key>``) that grow with the factor; nothing else changes (the epsilon neither).
WIDENED_KEYS = ("embedding_length", "feed_forward_length", "attention.head_count", "attention.head_count_kv")


class WidenError(TandemError, ValueError):
    """The source cannot be widened (a tensor or a value this construction does not know)."""

    hint = "stand-ins are made from llama-style models (see `launcher.py models standin --help`)"


class Cancelled(WidenError):
    hint = "nothing half-written was kept; derive it again to start over"


def rule_for(t: TensorInfo) -> Rule:
    role = t.name.split(".", 2)[2] if t.name.startswith("blk.") else t.name
    rule = RULES.get(role)
    if rule is None:
        raise WidenError(f"tensor {t.name!r} is not one a stand-in knows how to widen (known: "
                         f"{', '.join(sorted(RULES))}); the model has parts this construction would change")
    if len(t.shape) != len(rule.dims):
        raise WidenError(f"tensor {t.name!r} has {len(t.shape)} dimensions, expected {len(rule.dims)}")
    return rule


def widened_shape(t: TensorInfo, factor: int) -> tuple[int, ...]:
    """The tensor's shape in numpy order (rows, columns) after widening."""
    shape = tuple(reversed(t.shape))
    return tuple(d if dim is Dim.KEPT else d * factor for d, dim in zip(shape, rule_for(t).dims))


def out_dtype(t: TensorInfo, ftype: str) -> np.dtype:
    """F32 everywhere, or F16 for the matrices with norms and biases kept F32 (as llama.cpp's converter does)."""
    return np.dtype(np.float16 if ftype == "F16" and len(t.shape) == 2 else np.float32)


def padded(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def data_bytes(header: Header, factor: int, ftype: str) -> int:
    """Bytes of tensor data in the widened file (each tensor padded to the alignment)."""
    align = header.alignment()
    return sum(padded(math.prod(widened_shape(t, factor)) * out_dtype(t, ftype).itemsize, align)
               for t in header.tensors)


# --- metadata -------------------------------------------------------------------------------------------------

def _field_value(field: Any) -> tuple[Any, GGUFValueType, Optional[GGUFValueType]]:
    """(value, type, array item type) of a GGUFReader field, strings as raw bytes (never re-decoded)."""
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        if len(field.types) != 2:
            raise WidenError(f"metadata field {field.name} is an array of arrays, which this writer does not copy")
        sub = field.types[1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]) for i in field.data], kind, sub
        items = np.concatenate([field.parts[i] for i in field.data]) if field.data else np.empty(0)
        return items.tolist(), kind, sub
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[-1]), kind, None
    return field.parts[-1].tolist()[0], kind, None


def copy_metadata(reader: GGUFReader, writer: GGUFWriter, arch: str, factor: int,
                  extra: dict[str, tuple[Any, GGUFValueType]]) -> None:
    """Every field of the source, with the widened hyperparameters changed and ``extra`` set (same types)."""
    widen = {f"{arch}.{k}" for k in WIDENED_KEYS}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in extra:
            continue  # the writer writes the file's own counts and the architecture
        value, kind, sub = _field_value(field)
        if kind == GGUFValueType.ARRAY and not value:
            continue  # the writer cannot write an empty array; an absent key reads as its default
        if name in widen:
            value = [v * factor for v in value] if isinstance(value, list) else value * factor
        writer.add_key_value(name, value, kind, sub_type=sub)
    for name, (value, kind) in extra.items():
        writer.add_key_value(name, value, kind)


# --- tensor data ----------------------------------------------------------------------------------------------

class _Out:
    """The output file after its header: every byte written is hashed and counted for the progress bar."""

    def __init__(self, fout: Any, hasher: Any, advance: Callable[[int], None],
                 cancel: Optional[threading.Event]):
        self.fout, self.hasher, self.advance, self.cancel = fout, hasher, advance, cancel

    def write(self, data: bytes | memoryview, count: bool = True) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("cancelled: the stand-in was not finished")
        self.fout.write(data)
        self.hasher.update(data)
        if count:
            self.advance(len(data))

    def pad(self, align: int) -> None:
        n = padded(self.fout.tell(), align) - self.fout.tell()
        if n:
            self.write(bytes(n), count=False)


def _rows(fd: int, at: int, count: int, row_bytes: int, qtype: GGMLQuantizationType, cols: int) -> np.ndarray:
    """``count`` source rows starting at byte ``at``, as float32 (dequantized where the source is quantized)."""
    raw = os.pread(fd, count * row_bytes, at)
    if len(raw) != count * row_bytes:
        raise WidenError(f"the source ended early (read {len(raw)} of {count * row_bytes} bytes at {at})")
    try:
        out = dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(count, row_bytes), qtype)
    except NotImplementedError:
        raise WidenError(f"the source's tensors of type {qtype.name} cannot be read back here; derive an F32 or "
                         "F16 copy of it first") from None
    return np.asarray(out, dtype=np.float32).reshape(count, cols)


def write_tensor(fd: int, data_start: int, t: TensorInfo, factor: int, ftype: str, out: _Out) -> None:
    """Stream one widened tensor: the source's rows in chunks with their columns widened, once when rows are
    kept, ``factor`` times when they are copied, or once followed by zero rows when they are zero-padded."""
    dims = rule_for(t).dims
    row_dim, col_dim = (Dim.KEPT, dims[0]) if len(dims) == 1 else dims
    shape = tuple(reversed(t.shape))
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape
    new_cols = cols if col_dim is Dim.KEPT else cols * factor
    dtype = out_dtype(t, ftype)
    row_bytes, out_row = t.n_bytes // rows, new_cols * dtype.itemsize
    step = max(1, CHUNK // out_row)
    qtype = GGMLQuantizationType(t.ggml_type)
    for copy in range(1 if row_dim is Dim.KEPT else factor):
        for r0 in range(0, rows, step):
            n = min(step, rows - r0)
            if copy and row_dim is Dim.ZEROS:
                out.write(bytes(n * out_row))
                continue
            values = _rows(fd, data_start + t.offset + r0 * row_bytes, n, row_bytes, qtype, cols)
            if col_dim is Dim.COPIES:
                block = np.tile(values, (1, factor)).astype(dtype, copy=False)
            else:
                block = np.zeros((n, new_cols), dtype=dtype)
                block[:, :cols] = values
            out.write(block.data)


def write(source: Path, header: Header, dest: Path, factor: int, ftype: str,
          extra: dict[str, tuple[Any, GGUFValueType]], advance: Callable[[int], None],
          cancel: Optional[threading.Event] = None) -> str:
    """Write the widened model to ``dest`` (a fresh file) and return its sha256."""
    arch = header.text("general.architecture")
    reader = GGUFReader(source)  # for the metadata's exact value types; tensor data is read with pread
    writer = GGUFWriter(None, arch)
    writer.data_alignment = header.alignment()
    copy_metadata(reader, writer, arch, factor, extra)
    del reader
    for t in header.tensors:
        shape, dtype = widened_shape(t, factor), out_dtype(t, ftype)
        writer.add_tensor_info(t.name, shape, dtype, math.prod(shape) * dtype.itemsize)
    hasher = hashlib.sha256()
    writer.write_header_to_file(dest)
    try:
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        fout = writer.fout[0]
        fout.flush()
        with open(dest, "rb") as f:  # the header as written, hashed once (a few MB: the vocabulary)
            hasher.update(f.read(fout.tell()))
        out = _Out(fout, hasher, advance, cancel)
        align = header.alignment()
        with open(source, "rb") as src:
            for t in header.tensors:
                out.pad(align)
                write_tensor(src.fileno(), header.data_offset, t, factor, ftype, out)
        out.pad(align)
        fout.flush()
        os.fsync(fout.fileno())
    finally:
        writer.close()
    return hasher.hexdigest()
