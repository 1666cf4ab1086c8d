"""A thin backend on llama-cpp-python's low-level API: one model, one context, one sequence.

Only what the decode loop needs: batched decode with logits requested for chosen rows, checked KV rollback
(``llama_memory_seq_rm``), tokenizer access and vocabulary facts. ``Llama.generate``'s draft path is not used
(it forces ``logits_all`` and sizes its scores buffer from the wrong flag).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.llama import chunking, nextn
from app.engine.errors import TandemError
from app.engine.llama.lifetime import Closable
from app.engine.llama.llamalog import quiet_logs, recorded_log
from app.engine.llama.memory import DEFAULT_RS_SNAPSHOTS, RecurrentMemory, recurrent_rollback
from app.engine.llama.placement import Placement, parse as parse_placement
from app.engine.llama.prefix import common_prefix  # (callers import it from here too)
from app.engine.llama.treekv import TREE_SEQS, TreeKv, tree_params
from app.engine.llama.vocab import VOCAB_TYPES, FimTokens, VocabInfo, fim_tokens


class BackendError(TandemError, RuntimeError):
    hint = "check the model file with `launcher.py models check`"


class RollbackError(BackendError):
    """The KV cache refused a partial removal (recurrent or hybrid memory)."""

    hint, status, code = "turn speculation off for this model", 400, "invalid_value"


class ContextFullError(BackendError):
    """The sequence would not fit in the context window."""

    hint, status, code = "shorten the prompt, or give a larger context (--ctx)", 400, "context_length_exceeded"
    title = "Prompt too long"

    @classmethod
    def prompt(cls, n_tokens: int, n_ctx: int) -> "ContextFullError":
        """The error for a prompt of ``n_tokens`` past a context of ``n_ctx``."""
        return cls(f"the prompt is {n_tokens} tokens but the context holds {n_ctx}; "
                   "shorten it or load the pair with a larger context")


class TokenizeCancelled(BackendError):
    """Tokenisation was abandoned because the caller's cancel signal was set (the client left)."""


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 4096  # 0 = the model's training context
    n_gpu_layers: int = 0  # -1 = all
    n_threads: int = 0  # 0 = all cores
    n_batch: int = 512
    mmap: bool = True  # False reads the weights into memory instead of mapping the file
    rpc: tuple[str, ...] = ()  # RPC workers (host:port) to split the model over (see split.py)
    tensor_split: tuple[float, ...] = ()  # share of the offloaded layers per device, llama.cpp's order
    rs_snapshots: int = DEFAULT_RS_SNAPSHOTS  # recurrent-state snapshots for rollback (archs that have them)
    load_mtp: bool = True  # load the MTP (NextN) layers a GGUF carries, and keep the rows they draft from
    tree_seqs: int = TREE_SEQS  # sequences for tree drafts (a unified KV cache; 1: none; treekv.py)


def default_threads() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except Exception:  # pragma: no cover
        return os.cpu_count() or 1


class Model(Closable):
    """A loaded GGUF with its own context holding one sequence (id 0)."""

    recurrent_memory: Optional[RecurrentMemory] = None  # its book-keeping (None: a KV cache, or a split target)
    hidden: Optional[nextn.HiddenRows] = None  # the rows an MTP head drafts from (None: no MTP head to feed)
    ctx: Any = None  # the llama.cpp context (None: a split target's runs in its child process, split.py)
    tree: Optional[TreeKv] = None  # tree drafts' verify passes (treekv.py); None: none here, ``tree_refusal`` says why
    tree_refusal: Optional[str] = "a target split over RPC workers"

    def __init__(self, path: Path | str, options: LoadOptions = LoadOptions()):
        quiet_logs()
        self.path = Path(path)
        if not self.path.is_file():
            raise BackendError(f"model file not found: {self.path}")
        self.options = options
        self._piece = ctypes.create_string_buffer(256)
        self.cached: list[int] = []  # the tokens in the KV cache, in order
        self.decoded = 0  # tokens decoded since load (what prompt processing really read: promptcache.py)
        self._closed = True  # until loaded: nothing to free
        self._open(options)
        self._closed = False

    def _open(self, options: LoadOptions) -> None:
        """Load the weights and create the context (recording llama.cpp's log of it for ``placement``)."""
        with recorded_log() as lines:
            self._load(options)
        log = "".join(lines)
        self._placement = parse_placement(log, L.llama_model_n_layer(self.model))
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.n_batch = min(L.llama_n_batch(self.ctx), L.llama_n_ubatch(self.ctx))  # llama.cpp may clamp
        self.mem = L.llama_get_memory(self.ctx)
        self.recurrent = bool(L.llama_model_is_recurrent(self.model) or L.llama_model_is_hybrid(self.model))
        self.n_rs_seq = int(L.llama_n_rs_seq(self.ctx)) if self.recurrent else 0
        # the longest suffix a verification pass may drop: None = any (a KV cache), 0 = none (no snapshots)
        self.rollback_limit = min(self.n_rs_seq, self.n_batch - 1) if self.recurrent else None
        self.recurrent_memory = RecurrentMemory(self.ctx, self.n_rs_seq) if self.recurrent else None
        self._batch = L.llama_batch_init(max(self.n_batch, 1), 0, 1)
        self.hidden = nextn.tap(self.model, self.ctx, self.meta("general.architecture"), options.load_mtp)
        self.tree, self.tree_refusal = TreeKv.open(self, self.recurrent)

    def _load(self, options: LoadOptions) -> None:
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if options.n_gpu_layers < 0 else options.n_gpu_layers
        mparams.load_mode = L.LLAMA_LOAD_MODE_MMAP if options.mmap else L.LLAMA_LOAD_MODE_NONE
        mparams.load_mtp = options.load_mtp
        if options.tensor_split:
            self._split = (ctypes.c_float * L.llama_max_devices())(*options.tensor_split[:L.llama_max_devices()])
            mparams.tensor_split = self._split
        self._load_model(mparams)
        cparams = L.llama_context_default_params()
        n_ctx = options.n_ctx or self.n_ctx_train
        cparams.n_ctx = min(n_ctx, self.n_ctx_train) if self.n_ctx_train > 0 else n_ctx
        cparams.n_batch = cparams.n_ubatch = options.n_batch
        cparams.n_seq_max = 1
        tree_params(cparams, self.model, options.tree_seqs)
        cparams.n_rs_seq = max(0, options.rs_snapshots)  # llama.cpp clamps it to 0 where the arch has none
        cparams.n_threads = cparams.n_threads_batch = self.n_threads = options.n_threads or default_threads()
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            arch = self.meta("general.architecture")
            L.llama_model_free(self.model)
            if arch in nextn.ASSISTANT_ARCHS:
                raise BackendError(f"{self.path.name} is a {arch} drafter: it runs only as the draft beside a "
                                   f"{'/'.join(sorted(nextn.ASSISTANT_ARCHS[arch]))} target")
            raise BackendError(f"could not create a context for {self.path.name} (n_ctx={cparams.n_ctx})")

    def _load_model(self, mparams) -> None:
        """``llama_model_load_from_file`` with ``mparams``, then the vocabulary facts every model has."""
        self.model = L.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self.model:
            raise BackendError(f"llama.cpp could not load {self.path.name}: not a valid GGUF model file?")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self._special_cache: dict[bool, Optional[chunking.Specials]] = {}
        self.n_ctx_train = L.llama_model_n_ctx_train(self.model)

    def placement(self) -> Placement:
        """What llama.cpp placed where when it loaded this model: layers on the GPU, bytes per device."""
        return self._placement

    # --- decoding -----------------------------------------------------------------------------------

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """Append ``tokens`` at ``n_past`` in one ``llama_decode`` and return the logits rows requested.

        ``logits_for`` lists indices into ``tokens`` (negative counts from the end). Returns a float32 array
        ``(len(logits_for), n_vocab)`` that views llama.cpp's buffer: valid until the next decode.
        """
        n = len(tokens)
        if n == 0:
            raise BackendError("decode called with no tokens")
        if n > self.n_batch:
            raise BackendError(f"batch of {n} tokens exceeds n_batch={self.n_batch}")
        n_past = len(self.cached)
        if n_past + n > self.n_ctx:
            raise ContextFullError(f"{n_past + n} tokens exceed the context of {self.n_ctx}")
        rows = sorted({i % n for i in logits_for})
        b = self._batch
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 0
        for i in rows:
            b.logits[i] = 1
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise BackendError(f"llama_decode failed with code {rc} ({'no KV slot' if rc == 1 else 'error'})")
        self.cached.extend(tokens)
        self.decoded += n
        if self.hidden is not None:
            self.hidden.record(n_past, n)
        if self.recurrent_memory is not None:
            self.recurrent_memory.decoded(n)
        if not rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = L.llama_get_logits(self.ctx)
        out = np.ctypeslib.as_array(ptr, shape=(len(rows), self.n_vocab))
        order = [rows.index(i % n) for i in logits_for]
        return out if order == list(range(len(rows))) else out[order]

    @property
    def n_past(self) -> int:
        return len(self.cached)

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Make the KV cache hold exactly ``tokens``, keeping the common prefix with what it holds (prompt
        reuse across chat turns) and decoding the rest in ``n_batch`` chunks.

        Returns a copy of the last token's logits when ``need_logits`` (at least one token is re-decoded).
        """
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"{len(tokens)} tokens do not fit in the context of {self.n_ctx}")
        keep = common_prefix(self.cached, tokens)
        if need_logits and tokens:
            keep = min(keep, len(tokens) - 1)
        self.rollback(keep)
        todo = list(tokens[keep:])
        logits = None
        for start in range(0, len(todo), self.n_batch):
            chunk = todo[start:start + self.n_batch]
            last = start + len(chunk) == len(todo)
            rows = self.decode(chunk, (-1,) if last and need_logits else ())
            if last and need_logits:
                logits = np.array(rows[0], copy=True)
        if self.recurrent_memory is not None and self.cached:
            self.recurrent_memory.save(len(self.cached))  # where a later rollback past the snapshots restarts from
        return logits

    def missing(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` a :meth:`sync` would decode (those past the common prefix)."""
        return len(tokens) - common_prefix(self.cached, tokens)

    def rollback(self, n_keep: int) -> None:
        """Drop every cached position >= ``n_keep``; checked. Recurrent memory: see ``memory.py``."""
        if n_keep >= len(self.cached):
            return
        if self.recurrent_memory is not None:
            recurrent_rollback(self, n_keep)
            return
        if not self.seq_rm(n_keep):
            raise RollbackError(
                f"{self.path.name}: the KV cache refused to roll back to {n_keep} "
                "(recurrent/hybrid models cannot drop rejected draft tokens)"
            )
        del self.cached[n_keep:]

    def memory_counts(self) -> dict:
        """Rollbacks by way (``memory.Way`` -> count) on recurrent memory; empty for a KV cache."""
        return dict(self.recurrent_memory.counts) if self.recurrent_memory is not None else {}

    def memory_notice(self) -> Optional[str]:
        """Why this model's sequence had to be decoded again, if it ever had to (said once)."""
        return self.recurrent_memory.notice if self.recurrent_memory is not None else None

    def seq_rm(self, n_keep: int) -> bool:
        """Drop the cached positions >= ``n_keep`` in llama.cpp (``cached`` untouched); whether it did."""
        return bool(L.llama_memory_seq_rm(self.mem, 0, n_keep, -1))

    def reset(self) -> None:
        L.llama_memory_clear(self.mem, True)
        self.cached.clear()
        if self.recurrent_memory is not None:
            self.recurrent_memory.clear()

    # --- tokenizer -----------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True,
                 limit: Optional[int] = None, cancel: chunking.Cancel = None) -> list[int]:
        """Token ids of ``text``; ``parse_special`` turns the text of control tokens (``<|im_end|>``) into those
        tokens, so pass False for anything a user wrote. More tokens than ``limit`` raise ContextFullError. A long
        text goes in pieces cut where llama.cpp splits anyway (``chunking``): the same ids in linear time, and
        ``cancel`` (an Event or a callable) checked between pieces raises TokenizeCancelled once set."""
        parts = [text]
        if len(text) > 2 * chunking.CHUNK_CHARS and (not add_special or self._bos_only()):
            parts = chunking.pieces(text, chunking.cut_points(text, self._specials(parse_special)))
        ids: list[int] = []
        for i, part in enumerate(parts):
            if chunking.cancelled(cancel):
                raise TokenizeCancelled("tokenisation was abandoned: the request was cancelled")
            try:
                ids += self._tokenize(part, add_special and i == 0, parse_special,
                                      None if limit is None else limit - len(ids))
            except ContextFullError:
                if len(parts) == 1:
                    raise
                raise ContextFullError(f"the prompt is more than {limit} tokens but the context holds {self.n_ctx}; "
                                       "shorten it or load the pair with a larger context") from None
        return ids

    def _tokenize(self, text: str, add_special: bool, parse_special: bool, limit: Optional[int]) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16 if limit is None else min(len(data) + 16, limit + 1)
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if limit is not None and (n < 0 and -n > limit or n > limit):
            raise ContextFullError.prompt(abs(n), self.n_ctx)
        if n < 0:
            buf = (L.llama_token * -n)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, -n, add_special, parse_special)
        return list(buf[:n])

    def _bos_only(self) -> bool:
        """Whether ``add_special`` adds only a BOS at the start (SPM, BPE, UGM, RWKV, PLaMo-2 without add-EOS),
        so that a text tokenised in pieces needs it on the first piece alone."""
        return L.llama_vocab_type(self.vocab) in (1, 2, 4, 5, 6) and not self.add_eos

    def _specials(self, parse_special: bool) -> Optional[chunking.Specials]:
        if parse_special not in self._special_cache:
            self._special_cache[parse_special] = chunking.vocab_specials(self.vocab, self.n_vocab, parse_special)
        return self._special_cache[parse_special]

    def is_control(self, token: int) -> bool:
        return bool(L.llama_vocab_is_control(self.vocab, token))

    def piece(self, token: int, special: bool = False) -> bytes:
        n = L.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            return buf.raw[:n]
        return self._piece.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    def fim_tokens(self) -> FimTokens:
        return fim_tokens(self.vocab)

    def token_text(self, token: int) -> str:
        return (L.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "surrogateescape")

    @property
    def bos(self) -> int:
        return L.llama_vocab_bos(self.vocab)

    @property
    def eos(self) -> int:
        return L.llama_vocab_eos(self.vocab)

    @property
    def add_bos(self) -> bool:
        return bool(L.llama_vocab_get_add_bos(self.vocab))

    @property
    def add_eos(self) -> bool:
        return bool(L.llama_vocab_get_add_eos(self.vocab))

    def vocab_info(self) -> VocabInfo:
        return VocabInfo(
            vocab_type=VOCAB_TYPES.get(L.llama_vocab_type(self.vocab), "unknown"),
            n_vocab=self.n_vocab,
            bos_id=self.bos,
            eos_id=self.eos,
            add_bos=bool(L.llama_vocab_get_add_bos(self.vocab)),
            add_eos=bool(L.llama_vocab_get_add_eos(self.vocab)),
            tokens=[self.token_text(i) for i in range(self.n_vocab)],
        )

    def chat_template(self) -> Optional[str]:
        raw = L.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8") if raw else None

    def meta(self, key: str) -> Optional[str]:
        buf = ctypes.create_string_buffer(4096)
        n = L.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    @property
    def size_bytes(self) -> int:
        return int(L.llama_model_size(self.model))

    @property
    def n_params(self) -> int:
        return int(L.llama_model_n_params(self.model))

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        L.llama_model_desc(self.model, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    # --- lifetime ------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        L.llama_batch_free(self._batch)
        if self.tree is not None:
            self.tree.close()
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)
