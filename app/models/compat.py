"""Is a draft compatible with a target? The engine's own rule (:func:`app.engine.llama.vocab.check`), computed from
GGUF metadata: from the local file's header when the model is installed, else from the header alone read from
the Hub with range requests — before loading and before downloading."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from app.engine.errors import TandemError
from app.engine.llama.vocab import VocabInfo, check
from app.models import archs, heads, library, meta
from app.models.catalog import Catalog, load
from app.models.ggufheader import GGUFError
from app.models.meta import ModelMeta


class CompatError(TandemError, ValueError):
    """A model could not be judged (unknown id, unreadable file, Hub unreachable); the message says why."""

    hint, status = "give an installed model id, a catalog id or a .gguf path", 400


@dataclass
class Side:
    ref: str
    id: str
    where: str  # "local", "hub header", "hub header (kept copy)"
    path: Optional[str] = None
    bytes_read: int = 0
    meta: Optional[dict[str, Any]] = None


@dataclass
class Verdict:
    ok: bool
    reason: str
    target: Side
    draft: Side
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe(ref: str, cat: Optional[Catalog] = None, offline: bool = False) -> tuple[VocabInfo, ModelMeta, Side]:
    """Vocabulary and metadata of a model given by installed id, path or catalog id."""
    cat = cat or load()
    rec = library.find(ref, cat)
    if rec is not None:
        try:
            m, v = meta.read(rec["path"])
        except GGUFError as exc:
            raise CompatError(f"{ref}: {exc}") from None
        return v, m, Side(ref, rec["id"], "local", rec["path"], 0, m.to_dict())
    entry = cat.models.get(ref)
    if entry is None:
        if Path(ref).suffix == ".gguf" or "/" in ref or "\\" in ref:
            raise CompatError(f"no such file: {ref}")
        raise CompatError(f"{ref!r} is neither an installed model, a catalog model nor a .gguf path")
    if entry.derive_from:  # a re-quantization keeps the vocabulary of its source
        v, m, side = describe(entry.derive_from, cat, offline)
        return v, m, Side(ref, entry.id, f"{side.where} (of {entry.derive_from})", None, side.bytes_read, side.meta)
    if not entry.repo:
        raise CompatError(f"{ref} is not installed yet (run `launcher.py models pull {ref}`) and has no Hub "
                          "header to read")
    from app.models import remote

    got = remote.cached_header(entry.repo, entry.file)
    if got is None:
        if offline:
            raise CompatError(f"{ref}: header not read yet (needs the Hub)")
        try:
            got = remote.fetch_header(entry.repo, entry.file, entry.revision)
        except Exception as exc:  # noqa: BLE001 - DownloadError and friends carry a clear message
            raise CompatError(f"{ref}: {exc}") from None
    try:
        v = meta.vocab_info(got.header)
        m = meta.model_meta(got.header, got.file_size, v)
    except GGUFError as exc:
        raise CompatError(f"{ref}: {exc}") from None
    where = "hub header (kept copy)" if got.cached else "hub header"
    return v, m, Side(ref, entry.id, where, None, got.bytes_read, m.to_dict())


def check_pair(target: str, draft: str, cat: Optional[Catalog] = None, remember: bool = True,
               offline: bool = False) -> Verdict:
    """Judge ``draft`` for ``target`` (ids or paths). Raises :class:`CompatError` if either can't be read."""
    cat = cat or load()
    tv, tm, ts = describe(target, cat, offline)
    dv, dm, ds = describe(draft, cat, offline)
    verdict = check(tv, dv)
    refusal = kind_refusal(tm, dm)
    if refusal is not None and verdict.ok:
        verdict = replace(verdict, ok=False, reason=refusal)
    out = Verdict(verdict.ok, verdict.reason, ts, ds)
    warning = speed_warning(tm, dm)
    if warning:
        out.extra["warning"] = warning
    notes = [n for n in (archs.memory_note(tm.architecture, "target"), archs.memory_note(dm.architecture, "draft")) if n]
    if notes:
        out.extra["memory"] = notes
    mtp = archs.mtp_note(tm.architecture, tm.nextn_layers)
    if mtp:
        out.extra["mtp"] = mtp
    assistant = archs.assistant_note(dm.architecture)
    if assistant:
        out.extra["assistant"] = assistant
    head = heads.note(dm)
    if head:
        out.extra["head"] = head
    if remember:
        library.remember_pair(ts.id, ds.id, verdict.ok, verdict.reason,
                              fingerprints=[tm.vocab_fingerprint, dm.vocab_fingerprint])
    return out


def kind_refusal(target: ModelMeta, draft: ModelMeta) -> Optional[str]:
    """Why this draft cannot pair with this target beyond the vocabulary: an assistant drafter or a head (EAGLE-3)
    made for another target; None if nothing stands in the way."""
    return archs.assistant_refusal(target.architecture, draft.architecture) or heads.refusal(target, draft)


SLOW_DRAFT = 0.6  # draft weight bytes / target weight bytes from which a draft step costs too much to pay


def speed_warning(target: ModelMeta, draft: ModelMeta) -> Optional[str]:
    """A caution when the draft will hardly be cheaper than the target, or None.

    An estimate from the bytes of weights a decode step reads, which set its cost where memory bandwidth
    limits it (CPUs, and GPUs at batch 1); compute-bound steps and llama.cpp's overheads make a small draft
    costlier than its bytes say (the demo's Q4_1 draft reads 16 % of its F32 target's bytes and costs about
    40 % of a step). Parameter counts say nothing here: the demo pair has the same 135M parameters twice."""
    if not (target.weights_bytes and draft.weights_bytes):
        return None
    ratio = draft.weights_bytes / target.weights_bytes
    if ratio < SLOW_DRAFT:
        return None
    outlook = "no speed-up to expect" if ratio >= 1 else "little speed-up to expect"
    return (f"the draft's weights are {ratio:.0%} of the target's ({draft.weights_bytes / 2**20:.0f} vs "
            f"{target.weights_bytes / 2**20:.0f} MiB): {outlook} (an estimate from weight sizes; measure "
            "with `launcher.py bench`)")


def known_verdict(pair_target: str, pair_draft: str) -> Optional[dict[str, Any]]:
    """The remembered verdict for a pair, if it was checked before."""
    for rec in library.pairs():
        if rec["target"] == pair_target and rec["draft"] == pair_draft:
            return rec
    return None


__all__ = ["CompatError", "Verdict", "check_pair", "describe", "kind_refusal", "known_verdict"]
