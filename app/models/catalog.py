"""The catalog (``models.toml``): models and the target/draft pairs built from them.

Every entry is validated against :data:`MODEL_FIELDS` / :data:`PAIR_FIELDS` when the file is loaded. A bad entry
is left out and reported in :attr:`Catalog.errors` with its table and field (``models.x: field 'size' …``);
the rest of the catalog still loads.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from app import paths
from app.engine import limits
from app.engine.errors import TandemError
from app.engine.names import AUTO_K

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CATALOG_PATH = Path(__file__).resolve().parents[2] / "models.toml"


@dataclass(frozen=True)
class ModelEntry:
    id: str
    name: str
    family: str
    file: str
    quant: str = ""
    params: str = ""
    size: Optional[int] = None
    sha256: Optional[str] = None
    context: Optional[int] = None
    license: str = ""
    repo: Optional[str] = None
    pypi: Optional[str] = None
    member: Optional[str] = None
    pypi_parts: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    derive_from: Optional[str] = None
    ftype: Optional[str] = None
    widen: Optional[int] = None  # with derive_from: a stand-in, the source widened this many times (standin.py)
    revision: str = "main"
    gated: bool = False
    # Architecture figures for the memory estimate before anything is downloaded (the header's values win).
    arch: str = ""
    layers: Optional[int] = None
    embd: Optional[int] = None
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    vocab: Optional[int] = None
    swa_window: int = 0
    swa_layers: int = 0
    attn_layers: Optional[int] = None  # hybrid memory: the trunk's attention layers (the rest are recurrent)
    state_floats: int = 0  # hybrid memory: recurrent state per recurrent layer (F32 values, n_embd_r + n_embd_s)
    nextn_layers: int = 0  # MTP (NextN) layers, counted in ``layers``


@dataclass(frozen=True)
class PairEntry:
    id: str
    name: str
    target: str
    draft: str
    k: Union[int, str] = AUTO_K  # an int in limits.RANGES["k"] or "auto" (limits.k_setting)
    use: tuple[str, ...] = ()
    default: bool = False
    offline: bool = False
    on_demand: bool = False  # fetched only when asked for, never by the default setup
    notes: str = ""


@dataclass
class Catalog:
    models: dict[str, ModelEntry] = field(default_factory=dict)
    pairs: dict[str, PairEntry] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    name: str = "models.toml"
    bad_default: Optional[str] = None  # the error of a pair marked default that was left out
    files: set[str] = field(default_factory=set)  # every model file the catalog names, left-out entries' too
    complete: bool = True  # False when the file or its [models] table could not be read at all

    def default_pair(self) -> PairEntry:
        """The pair marked ``default``; the first pair when none is marked. A default pair whose entry was
        left out is an error, never replaced by another pair (which would start another pair's download)."""
        for pair in self.pairs.values():
            if pair.default:
                return pair
        if self.bad_default:
            raise CatalogError(f"the default pair cannot be used: {self.bad_default}; no other pair was "
                               "chosen in its place")
        if not self.pairs:
            why = f": {self.errors[0]}" if len(self.errors) == 1 else (
                f" ({len(self.errors)} entries were left out)" if self.errors else "")
            raise CatalogError(f"{self.name} has no pair to use{why}")
        return next(iter(self.pairs.values()))

    def setup_pairs(self) -> list[str]:
        """The pairs ``launcher.py setup`` (and the test run) fetch when none is named: the offline demo pairs
        that are not marked ``on_demand``."""
        return [p.id for p in self.pairs.values() if p.offline and not p.on_demand]

    def from_pypi(self, model_id: str) -> bool:
        """True when the model comes from PyPI wheels, directly or derived from a model that does."""
        entry, seen = self.models.get(model_id), set()
        while entry is not None and entry.derive_from and entry.id not in seen:
            seen.add(entry.id)
            entry = self.models.get(entry.derive_from)
        return entry is not None and bool(entry.pypi or entry.pypi_parts)


# field -> (type, required). ``list`` means a list of strings.
MODEL_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True), "family": (str, True), "file": (str, True), "quant": (str, False),
    "params": (str, False), "size": (int, False), "sha256": (str, False), "context": (int, False),
    "license": (str, False), "repo": (str, False), "pypi": (str, False), "member": (str, False),
    "pypi_parts": (list, False), "members": (list, False), "derive_from": (str, False), "ftype": (str, False),
    "revision": (str, False), "gated": (bool, False), "arch": (str, False), "layers": (int, False),
    "embd": (int, False), "heads": (int, False), "kv_heads": (int, False), "head_dim": (int, False),
    "vocab": (int, False), "swa_window": (int, False), "swa_layers": (int, False), "attn_layers": (int, False),
    "state_floats": (int, False), "nextn_layers": (int, False), "widen": (int, False),
}
PAIR_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True), "target": (str, True), "draft": (str, True), "k": (object, False),
    "use": (list, False), "default": (bool, False), "offline": (bool, False),
    "on_demand": (bool, False), "notes": (str, False),
}
USES = ("chat", "code", "completion", "reasoning")
MAX_FILE_NAME = 255  # bytes in one file name on Linux and macOS file systems
MAX_ID = 100  # characters of an entry's id
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")


class EntryError(TandemError, ValueError):
    status = 400


class CatalogError(TandemError, ValueError):
    """The catalog cannot give what was asked for: no pair, or a default pair whose entry is bad."""

    hint, status = "fix that entry in models.toml, or name another pair with --pair", 400


class ProvisionError(TandemError, RuntimeError):
    """A pair or model cannot be made present (unknown id, no source, a fetch that failed)."""

    hint = "check the pair or model id (`launcher.py models list`) and the network"


def _check_fields(body: dict[str, Any], schema: dict[str, tuple[type, bool]]) -> None:
    for key in body:
        if key not in schema:
            raise EntryError(f"field {limits.shown(key)} is not known (known: {', '.join(schema)})")
    for key, (kind, required) in schema.items():
        if key not in body:
            if required:
                raise EntryError(f"field {key!r} is required")
            continue
        value = body[key]
        if kind is list:
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise EntryError(f"field {key!r} must be a list of strings")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise EntryError(f"field {key!r} must be a non-negative integer (got {limits.shown(value)})")
        elif kind is not object and not isinstance(value, kind):
            raise EntryError(f"field {key!r} must be a {kind.__name__} (got {type(value).__name__} "
                             f"{limits.shown(value)})")
        if isinstance(value, str) and _CONTROL.search(value):
            raise EntryError(f"field {key!r} holds a control character such as NUL (got {limits.shown(value)})")


def validate_model(body: dict[str, Any]) -> None:
    _check_fields(body, MODEL_FIELDS)
    if "sha256" in body and not _SHA256.match(body["sha256"]):
        raise EntryError("field 'sha256' must be 64 lower-case hex digits")
    if "repo" in body and not _REPO.match(body["repo"]):
        raise EntryError(f"field 'repo' must look like 'owner/name' (got {body['repo']!r})")
    sources = [k for k in ("repo", "pypi", "pypi_parts", "derive_from") if k in body]
    if len(sources) != 1:
        raise EntryError("field 'repo', 'pypi', 'pypi_parts' or 'derive_from': exactly one source is required"
                         f" (got {', '.join(sources) or 'none'})")
    needs = {"pypi": "member", "pypi_parts": "members", "derive_from": "ftype"}.get(sources[0])
    if needs and needs not in body:
        raise EntryError(f"field {needs!r} is required with {sources[0]!r}")
    if "widen" in body and ("derive_from" not in body or body["widen"] < 2):
        raise EntryError("field 'widen' (a stand-in's factor, 2 or more) goes with 'derive_from'")
    if "pypi_parts" in body and len(body["pypi_parts"]) != len(body.get("members", [])):
        raise EntryError("field 'members' must name one member per entry of 'pypi_parts'")
    if "/" in body["file"] or "\\" in body["file"] or body["file"] in ("", ".", ".."):
        raise EntryError(f"field 'file' must be a plain file name (got {limits.shown(body['file'])})")
    if len(body["file"].encode("utf-8")) > MAX_FILE_NAME:
        raise EntryError(f"field 'file' is {len(body['file'])} characters long: a file name holds at most "
                         f"{MAX_FILE_NAME} bytes (got {limits.shown(body['file'])})")


def validate_pair(body: dict[str, Any], models: dict[str, Any]) -> None:
    _check_fields(body, PAIR_FIELDS)
    for role in ("target", "draft"):
        if body[role] not in models:
            raise EntryError(f"field {role!r} names {limits.shown(body[role])}, which is not a valid [models] "
                             "entry")
    k = body.get("k", AUTO_K)
    try:
        limits.k_setting(k)
    except limits.LimitError:
        lo, hi = limits.RANGES["k"].lo, limits.RANGES["k"].hi
        raise EntryError(f"field 'k' must be \"auto\" or an integer from {lo:.0f} to {hi:.0f} (got {k!r})") from None
    bad = [u for u in body.get("use", []) if u not in USES]
    if bad:
        raise EntryError(f"field 'use' has unknown uses {bad} (known: {', '.join(USES)})")


def load(path: Optional[Path] = None) -> Catalog:
    """The catalog at ``path`` (default: ``models.toml``). Each entry that is left out is one line in
    ``errors``, said once per process on stderr, naming the entry and the value."""
    path = path or CATALOG_PATH
    cat = _load(path)
    for line in cat.errors:
        if (str(path), line) not in _said:
            _said.add((str(path), line))
            paths.warn(f"{path.name}: {line} — entry left out")
    return cat


_said: set[tuple[str, str]] = set()


def _load(path: Path) -> Catalog:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:200]
        return Catalog(errors=[f"not a readable TOML file: {why}"], name=path.name, complete=False)
    cat = Catalog(name=path.name, complete="models" in raw)
    model_errors: dict[str, str] = {}
    for mid, body in _table(raw, "models", cat).items():
        if isinstance(body, dict) and isinstance(body.get("file"), str):
            cat.files.add(body["file"])
        try:
            _check_id(mid)
            if not isinstance(body, dict):
                raise EntryError("must be a table")
            validate_model(body)
            body = dict(body)
            for key in ("pypi_parts", "members"):
                if key in body:
                    body[key] = tuple(body[key])
            cat.models[mid] = ModelEntry(id=mid, **body)
        except EntryError as exc:
            model_errors[mid] = f"models.{_id_shown(mid)}: {exc}"
            cat.errors.append(model_errors[mid])
    for pid, body in _table(raw, "pairs", cat).items():
        try:
            _check_id(pid)
            if not isinstance(body, dict):
                raise EntryError("must be a table")
            for role in ("target", "draft"):  # a pair of a left-out model: say why that model was left out
                if isinstance(body.get(role), str) and body[role] in model_errors:
                    raise EntryError(f"field {role!r} names {body[role]}, which was left out "
                                     f"({model_errors[body[role]]})")
            validate_pair(body, cat.models)
            body = dict(body)
            if "use" in body:
                body["use"] = tuple(body["use"])
            cat.pairs[pid] = PairEntry(id=pid, **body)
        except EntryError as exc:
            line = f"pairs.{_id_shown(pid)}: {exc}"
            cat.errors.append(line)
            if isinstance(body, dict) and body.get("default") not in (None, False):
                cat.bad_default = line
    return cat


def _id_shown(key: str) -> str:
    return key if 0 < len(key) <= MAX_ID and not _CONTROL.search(key) else limits.shown(key)


def _check_id(key: str) -> None:
    if not key or len(key) > MAX_ID or _CONTROL.search(key):
        raise EntryError(f"an id must be 1 to {MAX_ID} characters with no control characters "
                         f"(got {limits.shown(key)})")


def _table(raw: dict, name: str, cat: Catalog) -> dict:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        cat.errors.append(f"{name}: must be a table of entries")
        cat.complete = False
        return {}
    return value
