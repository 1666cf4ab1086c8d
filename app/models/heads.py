"""Drafts that read their target's own layers (an EAGLE-3 head; a DFlash block drafter when the engine has one):
which kind a draft GGUF is, and whether a target can feed it, judged from the two GGUF headers alone.

The judgement is the engine's own check (``eagle3rows.refusal``, which the drafter runs when it loads), fed with
the figures both headers carry: the target's architecture against the allow-list of those whose graphs record
layer inputs, its block count against the layer ids the head reads (``<arch>.target_layers``), its width against
the rows the head takes. So ``models check``, Pair settings, the Pair lab and ``bench`` say the same words as a
load would, before anything is loaded or downloaded: on a target of another architecture llama.cpp would stop
the whole process, and a real target takes gigabytes and minutes to load only to be refused.

A kind of head is one line of :data:`HEADS`, keyed by the GGUF architecture its drafter module names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from app.engine.drafters import eagle3
from app.engine.llama import eagle3rows
from app.models import meta
from app.models.ggufheader import GGUFError
from app.models.meta import ModelMeta

# (target arch, target block count, target width, layer ids read, row width) -> why not, or None
Refusal = Callable[[Optional[str], int, int, Sequence[int], int], Optional[str]]


@dataclass(frozen=True)
class Head:
    """One kind of head: how the app names it, the engine's check, and where the width of its rows is written."""

    label: str
    noun: str  # the label in a sentence ("an EAGLE-3 head")
    refusal: Refusal
    own_width: bool  # rows as wide as the head itself (DFlash); else ``<arch>.target_hidden_size`` (EAGLE-3)


HEADS: dict[str, Head] = {
    eagle3.ARCH: Head(eagle3.LABEL, "an EAGLE-3 head", eagle3rows.refusal, own_width=False),
}


def kind(arch: Optional[str]) -> Optional[Head]:
    """The kind of head a GGUF of ``arch`` is, or None for a model of its own."""
    return HEADS.get(arch or "")


def label_of(path: Path | str) -> Optional[str]:
    """How the app names the draft file at ``path`` when it is a head ("EAGLE-3 head"), else None."""
    try:
        head = kind(meta.read(path)[0].architecture)
    except GGUFError:
        return None
    return head.label if head else None


def refusal(target: ModelMeta, draft: ModelMeta) -> Optional[str]:
    """Why ``draft`` cannot draft for ``target`` as a head (or a head was given as the target), in the engine's
    words; None when it can, or when neither is a head."""
    as_target = kind(target.architecture)
    if as_target is not None:
        return (f"the target ({target.architecture}) is {as_target.noun}: it drafts only beside the model it "
                "was made for, as that model's draft")
    head = kind(draft.architecture)
    if head is None:
        return None
    width = draft.n_embd if head.own_width else draft.target_hidden
    return head.refusal(target.architecture, target.n_layers, target.n_embd, draft.target_layers, width)


def note(draft: ModelMeta) -> Optional[str]:
    """One sentence about a head as the draft (what it reads), or None for a model of its own."""
    head = kind(draft.architecture)
    if head is None:
        return None
    width = draft.n_embd if head.own_width else draft.target_hidden
    layers = ", ".join(str(i) for i in draft.target_layers) or "none"
    return (f"the draft ({draft.architecture}) is {head.noun}: it drafts from the inputs of the target's "
            f"layers {layers} ({width} wide each), which the target records while it decodes")


def file_refusal(target: Path | str, draft: Path | str) -> Optional[str]:
    """:func:`refusal` for two GGUF files, from their headers, as one line naming the file at fault; None when
    nothing stands in the way, and also when a header cannot be read (loading the file then says why)."""
    try:
        t, d = meta.read(target)[0], meta.read(draft)[0]
    except GGUFError:
        return None
    why = refusal(t, d)
    return None if why is None else f"{Path(target if kind(t.architecture) else draft).name}: {why}"


__all__ = ["HEADS", "Head", "file_refusal", "kind", "label_of", "note", "refusal"]
