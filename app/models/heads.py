"""Drafts that read their target's own layers (an EAGLE-3 head, a DFlash or DSpark block drafter): which kind a draft
GGUF is, and whether a target can feed it, judged from the two GGUF headers alone.

The judgement is the engine's own check (``eagle3rows.refusal``, which each drafter runs when it loads), fed with
the figures both headers carry: the target's architecture against the allow-list of those whose graphs record
layer inputs, its block count against the layer ids the head reads (``<arch>.target_layers``), its width against
the rows the head takes. So ``models check``, Pair settings, the Pair lab and ``bench`` say the same words as a
load would, before anything is loaded or downloaded: on a target of another architecture llama.cpp would stop
the whole process, and a real target takes gigabytes and minutes to load only to be refused. (A DFlash drafter's
own refusals that need its weights or tokenizer, such as a missing mask token, are still said when it loads.)

A kind of head is one line of :data:`HEADS`, keyed by the engine's :class:`~app.engine.llama.eagle3rows.HeadKind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from app.engine.drafters import dflash, eagle3
from app.engine.llama import eagle3rows
from app.engine.llama.eagle3rows import HeadKind
from app.models import meta
from app.models.ggufheader import GGUFError
from app.models.meta import ModelMeta


@dataclass(frozen=True)
class Head:
    """One kind of head: how the app names it, where the width of the rows it reads is written, and what refuses
    the file itself whatever the target (the engine's check, from header figures)."""

    kind: HeadKind
    label: str
    own_width: bool  # rows as wide as the head itself (DFlash); else ``<arch>.target_hidden_size`` (EAGLE-3)
    drafter_refusal: Callable[[ModelMeta], Optional[str]] = lambda m: None


def _block_refusal(m: ModelMeta) -> Optional[str]:
    return dflash.drafter_refusal(m.block_size, m.mask_token, m.n_vocab, m.selector_rank, m.markov)


HEADS: dict[HeadKind, Head] = {
    HeadKind.EAGLE3: Head(HeadKind.EAGLE3, eagle3.LABEL, own_width=False),
    HeadKind.DFLASH: Head(HeadKind.DFLASH, dflash.LABEL, own_width=True, drafter_refusal=_block_refusal),
}
_BY_ARCH = {k.value: h for k, h in HEADS.items()}


def kind(arch: Optional[str]) -> Optional[Head]:
    """The kind of head a GGUF of ``arch`` is, or None for a model of its own."""
    return _BY_ARCH.get(arch or "")


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
        return (f"the target ({target.architecture}) is {as_target.kind.reader}: it drafts only beside the model "
                "it was made for, as that model's draft")
    head = kind(draft.architecture)
    if head is None:
        return None
    # in the order the drafter's load asks, so a file wrong twice is refused as loading it would refuse it
    why = eagle3rows.arch_refusal(target.architecture, head.kind) or head.drafter_refusal(draft)
    if why is not None:
        return why
    width = draft.n_embd if head.own_width else draft.target_hidden
    return eagle3rows.refusal(target.architecture, target.n_layers, target.n_embd, draft.target_layers, width,
                              head.kind)


def note(draft: ModelMeta) -> Optional[str]:
    """One sentence about a head as the draft (what it reads), or None for a model of its own."""
    head = kind(draft.architecture)
    if head is None:
        return None
    width = draft.n_embd if head.own_width else draft.target_hidden
    layers = ", ".join(str(i) for i in draft.target_layers) or "none"
    return (f"the draft ({draft.architecture}) is {head.kind.reader}: it drafts from the inputs of the target's "
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
