"""The catalog (``models.toml``): models and the target/draft pairs built from them."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

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


@dataclass(frozen=True)
class PairEntry:
    id: str
    name: str
    target: str
    draft: str
    k: Union[int, str] = "auto"
    use: tuple[str, ...] = ()
    default: bool = False
    offline: bool = False


@dataclass
class Catalog:
    models: dict[str, ModelEntry] = field(default_factory=dict)
    pairs: dict[str, PairEntry] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def default_pair(self) -> PairEntry:
        for pair in self.pairs.values():
            if pair.default:
                return pair
        return next(iter(self.pairs.values()))


def load(path: Optional[Path] = None) -> Catalog:
    raw = tomllib.loads((path or CATALOG_PATH).read_text(encoding="utf-8"))
    cat = Catalog()
    for mid, body in raw.get("models", {}).items():
        body = dict(body)
        for key in ("pypi_parts", "members"):
            if key in body:
                body[key] = tuple(body[key])
        cat.models[mid] = ModelEntry(id=mid, **body)
    for pid, body in raw.get("pairs", {}).items():
        body = dict(body)
        if "use" in body:
            body["use"] = tuple(body["use"])
        cat.pairs[pid] = PairEntry(id=pid, **body)
    return cat
