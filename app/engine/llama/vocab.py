"""Draft/target vocabulary compatibility, judged exactly as llama.cpp judges it.

llama.cpp (``common_speculative_are_compatible`` in common/speculative.cpp) requires: the same vocabulary type,
the same BOS id and add-BOS flag, the same EOS id and add-EOS flag, vocabulary sizes within 128 of each other,
and equal token text for every id from 5 up to the smaller vocabulary. :class:`VocabInfo` can be filled from a
loaded model (``backend.Model.vocab_info``) or from GGUF metadata alone (the model manager), so a pair is judged
the same way before download, before loading and at load time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional, Sequence

from app.engine.errors import BadInput

MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID

# llama_vocab_type values and the GGUF ``tokenizer.ggml.model`` names that select them.
VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}
GGUF_TOKENIZER_MODELS = {
    "no_vocab": "none", "none": "none", "llama": "spm", "gpt2": "bpe", "bert": "wpm",
    "t5": "ugm", "rwkv": "rwkv", "plamo2": "plamo2",
}


@dataclass(frozen=True)
class VocabInfo:
    vocab_type: str  # one of VOCAB_TYPES' values
    n_vocab: int
    bos_id: int  # -1 when the model has none
    eos_id: int
    add_bos: bool
    add_eos: bool
    tokens: Sequence[str]  # token text by id

    def fingerprint(self) -> str:
        """A short hash of everything the compatibility check looks at; equal fingerprints always match."""
        h = hashlib.sha256()
        h.update(f"{self.vocab_type}|{self.bos_id}|{self.eos_id}|{self.add_bos}|{self.add_eos}|".encode())
        for text in self.tokens:
            h.update(text.encode("utf-8", "surrogateescape"))
            h.update(b"\x00")
        return h.hexdigest()[:16]


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


class IncompatiblePair(BadInput, ValueError):
    """Raised when a draft cannot speculate for a target; the message names the first difference."""

    hint = "choose a draft with the target's tokenizer (check with `launcher.py models check`)"


def check(target: VocabInfo, draft: VocabInfo) -> Compatibility:
    """Judge a pair; the reason names the first difference found, in llama.cpp's order of checks."""
    field_checks = [
        ("vocabulary type", target.vocab_type, draft.vocab_type),
        ("add-BOS flag", target.add_bos, draft.add_bos),
        ("BOS token id", target.bos_id, draft.bos_id),
        ("add-EOS flag", target.add_eos, draft.add_eos),
        ("EOS token id", target.eos_id, draft.eos_id),
    ]
    for what, t, d in field_checks:
        if t != d:
            return Compatibility(False, f"{what} differs: target {t!r}, draft {d!r}")
    gap = abs(target.n_vocab - draft.n_vocab)
    if gap > MAX_SIZE_DIFFERENCE:
        return Compatibility(
            False,
            f"vocabulary sizes differ by {gap} (target {target.n_vocab}, draft {draft.n_vocab}; "
            f"at most {MAX_SIZE_DIFFERENCE} allowed)",
        )
    first = first_text_difference(target.tokens, draft.tokens)
    if first is not None:
        return Compatibility(
            False,
            f"token {first} differs: target {target.tokens[first]!r}, draft {draft.tokens[first]!r}",
        )
    return Compatibility(True, "vocabularies match")


def first_text_difference(a: Sequence[str], b: Sequence[str]) -> Optional[int]:
    for i in range(CHECK_START_TOKEN_ID, min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return None


def require(target: VocabInfo, draft: VocabInfo) -> None:
    verdict = check(target, draft)
    if not verdict:
        raise IncompatiblePair(f"draft is incompatible with target: {verdict.reason}")


class FimUnsupported(BadInput, ValueError):
    """The model has no fill-in-the-middle tokens (llama.cpp's server answers 501 "not supported")."""

    code = "not_supported"
    status = 501
    hint = "load a code model trained for fill-in-the-middle (e.g. demo-qwen-coder)"


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's FIM tokens (None where it has none): prefix, suffix, middle are required."""

    pre: Optional[int]
    suf: Optional[int]
    mid: Optional[int]
    pad: Optional[int] = None
    rep: Optional[int] = None  # the repository name's marker
    sep: Optional[int] = None  # the file separator

    def missing(self) -> list[str]:
        """What llama.cpp names when it refuses ``/infill``: the absent required tokens."""
        return [name for name, tok in (("prefix", self.pre), ("suffix", self.suf), ("middle", self.mid))
                if tok is None]

    def require(self, model: str) -> None:
        gone = self.missing()
        if gone:
            raise FimUnsupported(f"infill is not supported by {model}: its vocabulary has no "
                                 f"{', '.join(gone)} token{'s' if len(gone) > 1 else ''} for fill-in-the-middle")


def fim_tokens(vocab) -> FimTokens:
    """A loaded vocabulary's fill-in-the-middle tokens, as llama.cpp found them (GGUF keys, else their text)."""
    import llama_cpp as L

    def tok(found: int) -> Optional[int]:
        return None if found < 0 else int(found)

    return FimTokens(pre=tok(L.llama_vocab_fim_pre(vocab)), suf=tok(L.llama_vocab_fim_suf(vocab)),
                     mid=tok(L.llama_vocab_fim_mid(vocab)), pad=tok(L.llama_vocab_fim_pad(vocab)),
                     rep=tok(L.llama_vocab_fim_rep(vocab)), sep=tok(L.llama_vocab_fim_sep(vocab)))


def detokenize(vocab, ids: Sequence[int], special: bool = True) -> str:
    """The text of ``ids`` (``special``: control tokens written as their text), in a buffer of its own, so it may
    run beside a generation (``Model.piece`` shares one)."""
    import ctypes

    import llama_cpp as L

    if not ids:
        return ""
    arr = (L.llama_token * len(ids))(*ids)
    cap = len(ids) * 8 + 16
    buf = ctypes.create_string_buffer(cap)
    n = L.llama_detokenize(vocab, arr, len(ids), buf, cap, False, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = L.llama_detokenize(vocab, arr, len(ids), buf, -n, False, special)
    return buf.raw[:n].decode("utf-8", errors="replace")
