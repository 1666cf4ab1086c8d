"""A fast reader for the header of a GGUF file: the key/value metadata and the tensor infos, nothing else.

The ``gguf`` package's ``GGUFReader`` builds a numpy view per array element and maps the tensor data, which
takes tens of seconds for a 262k-token vocabulary and fails on a file cut after the header. This reader follows
the same format (``gguf`` supplies the value types and quantization block sizes; the layout is GGUF v2/v3 as in
ggml's ``gguf.cpp``), works on any prefix of the file and raises :class:`Truncated` when the prefix ends
before the tensor data starts, so a remote header can be fetched in growing byte ranges until it parses.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from app.engine.errors import TandemError

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME = 64  # GGML_MAX_NAME: tensor names are shorter
MAX_ARRAY_DEPTH = 4
DEFAULT_ALIGNMENT = 32
FIRST_READ = 1 << 20

_SCALARS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i", GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_NUMPY = {GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
          GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
          GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "?", GGUFValueType.UINT64: "<u8",
          GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8"}


class GGUFError(TandemError, ValueError):
    """The bytes are not a readable GGUF header."""

    hint = "check that the file is a whole GGUF model; download or export it again"
    status = 400


class Truncated(GGUFError):
    """The bytes end before the header does; ``needed`` is a lower bound for the prefix length required."""

    def __init__(self, needed: int):
        super().__init__(f"GGUF header continues past byte {needed}")
        self.needed = needed


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        except (ValueError, KeyError):
            return 0
        return self.n_elements * size // block


@dataclass
class Header:
    version: int
    kv: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0  # where tensor data starts: every byte before it is header

    def get(self, key: str, default: Any = None) -> Any:
        return self.kv.get(key, default)

    # Typed reads: a field of the wrong type (an overwritten or hand-made header) is a GGUFError naming the
    # field, never a ValueError or TypeError from deep inside the code that uses it.

    def integer(self, key: str, default: Any = None) -> Any:
        """An integer field (``default`` when missing); a whole number of any width, or GGUFError."""
        value = self.kv.get(key)
        if value is None:
            return default
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise GGUFError(f"metadata field {key} is {describe(value)}, not an integer: a corrupt header")
        return int(value)

    def integers(self, key: str, default: int = 0) -> int:
        """An integer field that may also be a per-layer array (the largest value is taken)."""
        value = self.kv.get(key)
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            return int(value.max()) if value.size else default
        if isinstance(value, (list, np.ndarray)):
            raise GGUFError(f"metadata field {key} is {describe(value)}, not integers: a corrupt header")
        return self.integer(key, default)

    def text(self, key: str, default: Any = None) -> Any:
        """A string field (``default`` when missing), or GGUFError."""
        value = self.kv.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise GGUFError(f"metadata field {key} is {describe(value)}, not a string: a corrupt header")
        return value

    def flag(self, key: str, default: Any = None) -> Any:
        """A boolean field (``default`` when missing); 0 and 1 are taken as well, anything else is GGUFError."""
        value = self.kv.get(key)
        if value is None:
            return default
        if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
            return bool(value)
        raise GGUFError(f"metadata field {key} is {describe(value)}, not a boolean: a corrupt header")

    def strings(self, key: str) -> list[str]:
        """A string-array field ([] when missing), or GGUFError."""
        value = self.kv.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise GGUFError(f"metadata field {key} is {describe(value)}, not a list of strings: a corrupt header")
        return value

    def alignment(self) -> int:
        """``general.alignment`` (32 when missing or 0): a power of two, or GGUFError."""
        align = self.integer("general.alignment", DEFAULT_ALIGNMENT) or DEFAULT_ALIGNMENT
        if align < 0 or align & (align - 1) or align > 1 << 30:
            raise GGUFError(f"invalid general.alignment {align} (must be a power of two)")
        return align


def describe(value: Any) -> str:
    """A metadata value as an error message quotes it: its kind and, for a short one, the value."""
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, (list, np.ndarray)):
        return f"an array of {len(value)} values"
    if isinstance(value, (bool, np.bool_)):
        return f"the boolean {bool(value)}"
    return f"{type(value).__name__} {str(value)[:40]}"


class _Cursor:
    def __init__(self, buf: bytes | memoryview):
        self.buf, self.pos, self.depth = memoryview(buf), 0, 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.buf):
            raise Truncated(end)
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise Truncated(self.pos + size)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> bytes:
        return bytes(self.take(self.scalar("<Q")))

    def value(self, vtype: int) -> Any:
        try:
            vtype = GGUFValueType(vtype)
        except ValueError:
            raise GGUFError(f"unknown GGUF value type {vtype} at byte {self.pos}") from None
        if vtype == GGUFValueType.STRING:
            return self.string().decode("utf-8", "surrogateescape")
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == GGUFValueType.ARRAY:
            itype, count = self.scalar("<I"), self.scalar("<Q")
            if itype == GGUFValueType.STRING:
                return self._strings(count)
            if itype in _NUMPY:
                dtype = np.dtype(_NUMPY[GGUFValueType(itype)])
                return np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).copy()
            if self.depth >= MAX_ARRAY_DEPTH:
                raise GGUFError(f"arrays nested deeper than {MAX_ARRAY_DEPTH} at byte {self.pos}: a corrupt header")
            self.depth += 1
            try:
                return [self.value(itype) for _ in range(count)]
            finally:
                self.depth -= 1
        raise GGUFError(f"unhandled GGUF value type {vtype}")

    def _strings(self, count: int) -> list[str]:
        buf, pos, size, unpack, out = self.buf, self.pos, len(self.buf), struct.unpack_from, []
        for _ in range(count):
            if pos + 8 > size:
                raise Truncated(pos + 8)
            (n,) = unpack("<Q", buf, pos)
            pos += 8
            if pos + n > size:
                raise Truncated(pos + n)
            out.append(bytes(buf[pos:pos + n]).decode("utf-8", "surrogateescape"))
            pos += n
        self.pos = pos
        return out


def parse(buf: bytes | memoryview) -> Header:
    """Parse a GGUF header from the start of ``buf`` (the whole file or any long enough prefix of it)."""
    cur = _Cursor(buf)
    magic = bytes(cur.take(4))
    if magic != GGUF_MAGIC:
        # the file's own bytes are never quoted: any file in the data folder may be named here (a key, a store)
        raise GGUFError("not a GGUF file: it does not begin with the GGUF signature")
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise GGUFError(f"GGUF version {version} is not supported (2 or 3 expected; big-endian files are not)")
    n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
    header = Header(version=version)
    for _ in range(n_kv):
        key = cur.string().decode("utf-8", "replace")
        header.kv[key] = cur.value(cur.scalar("<I"))
    for _ in range(n_tensors):
        name = cur.string().decode("utf-8", "replace")
        n_dims = cur.scalar("<I")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} expected): a corrupt header")
        shape = tuple(cur.scalar("<Q") for _ in range(n_dims))
        header.tensors.append(TensorInfo(name, shape, cur.scalar("<I"), cur.scalar("<Q")))
    align = header.alignment()
    header.data_offset = (cur.pos + align - 1) // align * align
    return header


def read_prefix(fetch: Callable[[int, int], bytes], first: int = FIRST_READ,
                limit: int = 1 << 30) -> tuple[Header, bytes]:
    """Parse a header from a source read in growing pieces: ``fetch(start, end)`` returns bytes [start, end)
    (fewer at the end of the file). Returns the header and the bytes read."""
    data = bytearray()
    want = first
    while True:
        chunk = fetch(len(data), want)
        data += chunk
        try:
            return parse(data), bytes(data)  # type: ignore[arg-type]  # a bytearray reads as bytes do
        except Truncated as exc:
            if len(data) < want or exc.needed > limit:  # the source ended: the file is cut short (or corrupt)
                raise GGUFError(f"the file ends inside its GGUF header (after {len(data)} bytes)") from None
            if len(data) >= limit:
                raise GGUFError(f"GGUF header larger than {limit} bytes") from None
            want = min(limit, max(2 * len(data), exc.needed + (1 << 16)))


def read_file(path: Path | str) -> Header:
    """The header of a local GGUF file, reading only as much of the file as the header takes."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise GGUFError(f"{path.name}: the file is empty (0 bytes)")

        def fetch(start: int, end: int) -> bytes:
            f.seek(start)
            return f.read(end - start)

        try:
            return read_prefix(fetch, first=min(FIRST_READ, size), limit=size)[0]
        except GGUFError as exc:
            raise GGUFError(f"{path.name}: {exc}") from None


def check_layout(header: Header, file_size: int) -> None:
    """Raise GGUFError unless the tensor table is consistent and the file holds every tensor's data — the
    checks llama.cpp's GGUF loader makes (known types, whole blocks per row, unique short names, offsets laid
    out one after another on the alignment), so a truncated or corrupted file is refused before it is used."""
    align = header.alignment()
    expected, names = 0, set()
    for t in header.tensors:
        if not t.name or len(t.name.encode()) >= MAX_NAME or t.name in names:
            raise GGUFError(f"tensor name {t.name[:80]!r} is empty, too long or repeated: a corrupt tensor table")
        names.add(t.name)
        try:
            block, _ = GGML_QUANT_SIZES[GGMLQuantizationType(t.ggml_type)]
        except (ValueError, KeyError):
            raise GGUFError(f"tensor {t.name!r} has unknown type {t.ggml_type}: a corrupt tensor table") from None
        if t.n_elements >= 1 << 63 or t.shape[0] % block:
            raise GGUFError(f"tensor {t.name!r} has an impossible shape {t.shape}: a corrupt tensor table")
        if t.offset != expected:
            raise GGUFError(f"tensor {t.name!r} starts at data offset {t.offset}, expected {expected}: "
                            "a corrupt tensor table")
        end = header.data_offset + t.offset + t.n_bytes
        if end > file_size:
            raise GGUFError(f"the file is incomplete: tensor {t.name!r} ends at byte {end} but the file has "
                            f"{file_size} bytes (a cut download or copy?); fetch or copy it again")
        expected += (t.n_bytes + align - 1) // align * align
