"""Grammar-constrained decoding (llama.cpp's GBNF) that speculation cannot break.

A :class:`GrammarSpec` (a field of the generation config) names what the output must be: any JSON object, JSON
matching a schema (llama.cpp's own JSON-schema -> GBNF converter, as llama-cpp-python ships it), or a raw GBNF
grammar. :func:`compile_grammar` validates it against the target's vocabulary with llama.cpp's parser and
returns a :class:`Grammar`, the parse state (llama.cpp's grammar sampler, ``llama_sampler_init_grammar``).

With speculation, :class:`GrammarTrack` keeps the grammar in step with the KV cache:
- ``cut``: the draft is walked through clones of the state; the first proposal the grammar forbids is cut
  there, before the verify pass (the draft's own randomness decides where; rejection sampling stays exact);
- ``rows``: the verify pass's logits, each row masked by the state *after* the draft tokens before it, so the
  target chooses among the tokens the grammar allows at every position, as plain constrained decoding does;
- ``advance``: the state moves to the accepted prefix plus the next token; the states of rejected draft
  tokens are dropped with them (one clone per drafted position), as the KV cache rolls back.

Greedy decoding first checks the unconstrained argmax against the grammar (one token, cheap) and masks the
whole vocabulary only when the grammar forbids it: the masked argmax is the same token whenever it is allowed.
The distribution sampled from is the sampler's transforms applied to the masked logits (llama.cpp's
``grammar_first`` order), so tokens the grammar forbids have probability 0 exactly.

References: llama.cpp ``grammars/README.md`` (GBNF), ``src/llama-grammar.cpp`` (apply/accept: an EOG token is
allowed only where the grammar is complete; accepting a forbidden token aborts, so :meth:`Grammar.accept` checks
first), ``common/sampling.cpp`` (``common_sampler_sample`` tries the sampled token against the grammar before
masking the whole vocabulary).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import tempfile
import weakref
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterator, Optional, Sequence, Union

import llama_cpp as L
import numpy as np

from app.engine.llama import llamalog
from app.engine.errors import BadInput


class GrammarError(BadInput, ValueError):
    """A grammar or JSON schema that cannot constrain decoding; the message says why."""

    param = "response_format"


class GrammarKind(str, Enum):
    JSON_OBJECT = "json_object"  # any JSON object
    JSON_SCHEMA = "json_schema"  # JSON matching ``source`` (a JSON schema, as text)
    GBNF = "gbnf"  # ``source`` is a GBNF grammar whose start rule is ``root``


@dataclass(frozen=True)
class GrammarSpec:
    kind: GrammarKind
    source: str = ""

    @classmethod
    def json_object(cls) -> "GrammarSpec":
        return cls(GrammarKind.JSON_OBJECT)

    @classmethod
    def json_schema(cls, schema: Union[dict, str]) -> "GrammarSpec":
        """A schema as a dict or JSON text; raises GrammarError if it is not a JSON object."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise GrammarError(f"json_schema is not valid JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise GrammarError(f"json_schema must be a JSON object, not {type(schema).__name__}")
        return cls(GrammarKind.JSON_SCHEMA, json.dumps(schema))  # (property order kept: it is the output's)

    @classmethod
    def gbnf(cls, text: str) -> "GrammarSpec":
        if not isinstance(text, str) or not text.strip():
            raise GrammarError("grammar must be a non-empty GBNF string")
        return cls(GrammarKind.GBNF, text)

    def to_gbnf(self) -> str:
        """The GBNF text; raises GrammarError for a schema the converter cannot express."""
        if self.kind == GrammarKind.GBNF:
            return self.source
        schema = '{"type": "object"}' if self.kind == GrammarKind.JSON_OBJECT else self.source
        return schema_to_gbnf(schema)


def schema_to_gbnf(schema: Union[dict, str]) -> str:
    """llama.cpp's JSON-schema -> GBNF converter (llama_cpp.llama_grammar), its errors as GrammarError."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    text = schema if isinstance(schema, str) else json.dumps(schema)
    try:
        gbnf = json_schema_to_gbnf(text)
    except Exception as exc:  # the converter raises bare Exceptions, KeyErrors, ... for what it lacks
        raise GrammarError(f"json_schema cannot be turned into a grammar: {exc}") from None
    # The Python port lets a string hold raw control characters (a newline), which JSON forbids; llama.cpp's
    # own converter excludes them, as here.
    return gbnf.replace(_LOOSE_CHAR, _JSON_CHAR)


_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data
assert _TOKEN_DATA.itemsize == ctypes.sizeof(L.llama_token_data)


class Grammar:
    """A grammar's parse state over one vocabulary (an owned ``llama_sampler``; freed with the object)."""

    def __init__(self, handle: Any, vocab: Any, n_vocab: int, ids: Optional[np.ndarray] = None):
        self._handle = handle
        self._vocab, self.n_vocab = vocab, n_vocab
        self._free = weakref.finalize(self, L.llama_sampler_free, handle)
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        if ids is None:
            ids = np.zeros(n_vocab, dtype=_TOKEN_DATA)
            ids["id"] = np.arange(n_vocab, dtype=np.int32)
        self._ids = ids  # every token with logit 0: copied for each full-vocabulary pass (shared by clones)

    def clone(self) -> "Grammar":
        return Grammar(L.llama_sampler_clone(self._handle), self._vocab, self.n_vocab, self._ids)

    def _apply(self, cand: np.ndarray) -> None:
        arr = L.llama_token_data_array(data=cand.ctypes.data_as(L.llama_token_data_p), size=len(cand),
                                       selected=-1, sorted=False)
        L.llama_sampler_apply(self._handle, ctypes.byref(arr))

    def allows(self, token: int) -> bool:
        """Whether the grammar allows ``token`` next (an EOG token: whether the grammar is complete)."""
        if not 0 <= token < self.n_vocab:
            return False
        one = self._one
        one["id"], one["logit"], one["p"] = token, 0.0, 0.0
        self._apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def mask(self) -> np.ndarray:
        """Boolean mask over the vocabulary: the tokens the grammar allows next."""
        cand = self._ids.copy()
        self._apply(cand)
        return np.isfinite(cand["logit"])

    def constrain(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with -inf at every token the grammar forbids next."""
        allowed = self.mask()[:logits.shape[0]]
        if not allowed.any():
            raise GrammarError("no token of this vocabulary can continue the grammar here")
        return np.where(allowed, logits, -np.inf).astype(np.float32)

    def accept(self, token: int) -> None:
        """Advance past ``token``; raises GrammarError (not llama.cpp's abort) if the grammar forbids it."""
        if not self.allows(token):
            raise GrammarError(f"the grammar does not allow token {token} here")
        L.llama_sampler_accept(self._handle, token)


def compile_grammar(target: Any, spec: GrammarSpec) -> Grammar:
    """Parse ``spec`` with llama.cpp for ``target``'s vocabulary (a loaded model: ``.vocab``, ``.n_vocab``).

    Raises GrammarError naming the parser's complaint (undefined rule, syntax error, left recursion)."""
    vocab = target.vocab
    if vocab is None:
        raise GrammarError("this model cannot apply a grammar (no llama.cpp vocabulary)")
    text = spec.to_gbnf()
    with llamalog.recorded_log() as log, _captured_stderr() as err:
        handle = L.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
    if not handle:
        raise GrammarError(f"invalid grammar: {_complaint(err, log)}")
    return Grammar(handle, vocab, int(target.n_vocab))


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """What C code writes to stderr while the block runs (llama.cpp's grammar parser reports there; the block
    takes milliseconds, and whatever else writes to stderr meanwhile is lost). Nothing is captured where
    stderr is not a file descriptor that can be duplicated."""
    lines: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield lines
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode("utf-8", "replace").splitlines())


def _complaint(err: Sequence[str], log: Sequence[str]) -> str:
    """The parser's own words: 'error parsing grammar: <why>' from stderr, else llama.cpp's log."""
    for line in err:
        if "error parsing grammar:" in line:
            return line.split("error parsing grammar:", 1)[1].strip()
    said = " ".join(line.strip() for line in log if line.strip() and "failed to parse grammar" not in line)
    return said or "llama.cpp could not parse it"


class MaskedRows:
    """Target logits rows masked by the grammar state at each position, computed on first use."""

    def __init__(self, logits: np.ndarray, states: Sequence[Grammar]):
        self.logits, self.states = logits, states
        self.cache: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self.cache:
            self.cache[i] = self.states[i].constrain(self.logits[i])
        return self.cache[i]

    def __len__(self) -> int:
        return len(self.states)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.states), self.logits.shape[1])

    def gumbel_max(self, i: int, temperature: float, g: np.ndarray, tries: int = 32) -> int:
        """The Gumbel-max sample of ``softmax(logits[i] / temperature)`` restricted to what the grammar allows
        (no other transform): the best-scoring tokens are checked one at a time (microseconds each), and the
        whole vocabulary is masked only when none of the first ``tries`` is allowed; the same token either way."""
        if i in self.cache:
            return _argmax_masked(self.cache[i], temperature, g)
        z = self.logits[i]
        s = z.astype(np.float64) / temperature + g[:z.shape[0]]
        top = np.argpartition(-s, tries)[:tries]
        for x in top[np.argsort(-s[top], kind="stable")]:
            if self.states[i].allows(int(x)):
                return int(x)
        return _argmax_masked(self[i], temperature, g)


def _argmax_masked(row: np.ndarray, temperature: float, g: np.ndarray) -> int:
    s = row.astype(np.float64) / temperature + g[:row.shape[0]]
    return int(np.argmax(s))  # (-inf where the grammar forbids)


class GrammarTrack:
    """The grammar state of one generation, kept in step with the target's KV cache (see the module doc)."""

    def __init__(self, grammar: Grammar):
        self.state = grammar
        self.states: list[Grammar] = [grammar]  # state before each row of the current verify pass
        self.cut_at: Optional[int] = None  # the last draft was cut at this position (None: not cut)

    def cut(self, tokens: list[int]) -> int:
        """How many leading draft ``tokens`` the grammar allows; records the state before each of them."""
        self.states = [self.state]
        for tok in tokens:
            if not self.states[-1].allows(tok):
                break
            nxt = self.states[-1].clone()
            nxt.accept(tok)
            self.states.append(nxt)
        n = len(self.states) - 1
        self.cut_at = n if n < len(tokens) else None
        return n

    def rows(self, logits: np.ndarray, greedy: bool) -> Union[np.ndarray, MaskedRows]:
        """The verify pass's rows, constrained. ``greedy`` (temperature 0, no repetition penalty): a row is
        masked only where the grammar forbids its argmax; otherwise rows are masked lazily, on first use."""
        if not greedy:
            return MaskedRows(logits, self.states)
        out = np.array(logits[:len(self.states)], dtype=np.float32, copy=True)
        for i, state in enumerate(self.states):
            if not state.allows(int(np.argmax(out[i]))):
                out[i] = state.constrain(out[i])
        return out

    def advance(self, n: int, token: int, eog: bool) -> None:
        """``n`` draft tokens were accepted and ``token`` follows them: move the state there."""
        self.state = self.states[n]
        self.states = [self.state]
        if not eog:
            self.state.accept(token)
