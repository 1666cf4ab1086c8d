"""DFlash: a separate small GGUF (arch ``dflash``) that drafts a whole block in one non-causal pass, conditioned on
the inputs of some of the target's layers. DSpark is a DFlash GGUF with a Markov head (and a confidence head) on
top, and drafts through the same code.

A DFlash drafter has an encoder, ``fc`` (with ``enc.output_norm``), that fuses the target's layer-input rows at a
position ``P`` (``dflash.target_layers``, concatenated: ``eagle3rows.LayerRows``) into one row, and a few decoder
layers with a KV cache of their own. Where it has no token embeddings or output matrix of its own it borrows the
target's (``llama_context_params.ctx_other``). The protocol (``common/speculative.cpp``,
``common_speculative_impl_draft_dflash``; ``src/models/dflash.cpp``):

- the target's context outputs the inputs of the drafter's layers for every decoded token;
- a decode of a batch of *rows* (not tokens) runs them through ``fc`` and writes the result into every draft
  layer's K/V at the target's positions: the drafter's cache holds, at ``P``, the target's features of ``x_P``;
- to draft after a history of ``n`` tokens (the target holds the first ``n - 1``), one decode of the block
  ``[x_{n-1}, MASK × (B - 1)]`` at ``n - 1 …`` with causal attention off (``llama_set_causal_attn``): every slot
  sees the whole cache and the whole block. DFlash reads slots ``1 … B - 1`` (slot ``i`` denoises the token at its
  own position): at most ``B - 1`` drafts. DSpark with ``dflash.sample_from_anchor`` (the default) reads slots
  ``0 … B - 1`` (slot ``i`` predicts the token after it, biased by its Markov head along the greedy chain): ``B``;
- the block's entries are removed right after (llama.cpp's ``seq_rm`` on the draft before each verify), so the
  cache only ever holds the target's features and a restored prompt state holds nothing drafted.

Each slot's distribution depends on the context alone (not on the tokens drawn at the slots before it), so
drafting one and verifying it against its own ``q`` keeps the target's law, as for every drafter.
:class:`DFlashModel` hands the block out through the ``DraftSource`` surface (``sync`` decodes it, ``decode`` gives
the next slot), so :class:`DFlashProposer` samples, couples, stops on ``p_min`` and takes lookup's handoff as the
draft model does; its output is the target's, whatever the block proposes.

Not read here: DFlash2 drafters (a selector lattice in place of logits, ``dflash.selector_rank``), refused in one
line; DSpark's confidence head (its drafts are kept or cut by the same ``p_min`` as every drafter's).

References: llama.cpp ``src/models/dflash.cpp``, ``common/speculative.cpp``; z-lab, "DFlash: Block
Diffusion for Flash Speculative Decoding".
"""

from __future__ import annotations

import ctypes
import struct
import time
from pathlib import Path
from typing import Optional, Sequence

import llama_cpp as L
import numpy as np

from app.engine.drafters import assistant, eagle3
from app.engine.drafters.mtp import MtpProposer
from app.engine.drafters.protocol import Draft
from app.engine.drafters.readcost import ReadCosts
from app.engine.llama import eagle3rows
from app.engine.llama.backend import BackendError, ContextFullError, LoadOptions, Model, RollbackError, common_prefix
from app.engine.llama.eagle3rows import HeadKind, LayerRows
from app.engine.names import DraftKind, ProposerName

ARCH = HeadKind.DFLASH.value
LABEL = DraftKind.DFLASH  # how the app names this kind of draft
DEFAULT_BLOCK = 16  # llama.cpp's driver, where the GGUF names no dflash.block_size
MAX_BLOCK = 256  # (a block is one batch: n_ubatch at least, non-causal)
DSPARK_TENSOR = "markov_w1.weight"  # what makes a DFlash GGUF a DSpark one (llama.cpp tells them apart so too)


class DFlashError(BackendError):
    """A DFlash drafter that cannot draft for this target."""

    hint, status, code = "load a DFlash drafter beside the target model it was trained for", 400, "invalid_value"


def is_dflash(path: Path | str) -> bool:
    return assistant.gguf_arch(path) == ARCH


def open_draft(path: Path | str, options: LoadOptions, target: Model) -> Model:
    """Load a draft GGUF beside ``target``: a DFlash drafter, an EAGLE-3 head or an assistant drafter tied to the
    target's context, else a model."""
    return DFlashModel(path, options, target) if is_dflash(path) else eagle3.open_draft(path, options, target)


_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes
_STRING, _ARRAY = 8, 9


def tensor_names(path: Path | str) -> set[str]:
    """The tensor names of a GGUF file, read from its header (the values skipped, never the weights); as many as
    were read where the file is not one."""
    def u32() -> int:
        return struct.unpack("<I", f.read(4))[0]

    def u64() -> int:
        return struct.unpack("<Q", f.read(8))[0]

    def skip(vtype: int) -> None:
        if vtype == _STRING:
            f.seek(u64(), 1)
        elif vtype == _ARRAY:
            sub, n = u32(), u64()
            if sub in _FIXED:
                f.seek(_FIXED[sub] * n, 1)
            else:
                for _ in range(n):
                    skip(sub)
        else:
            f.seek(_FIXED[vtype], 1)

    names: set[str] = set()
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return names
            u32()
            n_tensors, n_kv = u64(), u64()
            for _ in range(n_kv):
                f.seek(u64(), 1)
                skip(u32())
            for _ in range(n_tensors):
                names.add(f.read(u64()).decode("utf-8", "replace"))
                f.seek(8 * u32() + 4 + 8, 1)  # dims, type, offset
    except (OSError, struct.error, KeyError):
        pass  # not a GGUF file (llama.cpp says so when it is loaded)
    return names


def drafter_refusal(block: Optional[int], mask: Optional[int], n_vocab: int, selector_rank: int = 0,
                    dspark: bool = False) -> Optional[str]:
    """Why Tandem cannot draft with a DFlash file whose header says these (``dflash.block_size``, None where it
    names none; ``tokenizer.ggml.mask_token_id``, None or negative where none; its vocabulary's size;
    ``dflash.selector_rank``; whether it holds ``markov_w1.weight``: :func:`tensor_names`), whatever the target;
    None if it can. The target's side is ``eagle3rows.refusal(..., HeadKind.DFLASH)``. Loading asks both, and so
    can a check that reads headers alone."""
    if selector_rank > 0:
        return ("a DFlash2 drafter (it drafts through a selector lattice, not logits): Tandem reads DFlash and "
                "DSpark blocks only")
    if block is None and dspark:  # (llama.cpp's DSpark graph asserts it: the process would stop)
        return f"a DSpark drafter without {ARCH}.block_size in its metadata"
    size = block if block is not None else DEFAULT_BLOCK
    if not 2 <= size <= MAX_BLOCK:
        return f"its block size ({size}) is outside 2-{MAX_BLOCK}"
    if mask is None or not 0 <= mask < n_vocab:
        return "it names no mask token (tokenizer.ggml.mask_token_id), which fills its draft block"
    return None


class DFlashModel(Model):
    """A DFlash (or DSpark) GGUF with a context tied to ``target``'s: its cache holds the target's features, one
    decode drafts a block. ``cached``: the tokens whose features the cache holds (a prefix of the history)."""

    def __init__(self, path: Path | str, options: LoadOptions, target: Model):
        self.target = target
        self.rows: Optional[LayerRows] = None
        self.slots = np.zeros((0, 0), dtype=np.float32)  # the last block's logits, one row per draft
        self.next_slot = 0  # the row of ``slots`` that ``decode`` hands out next
        self.dspark = DSPARK_TENSOR in tensor_names(path)
        super().__init__(path, options)

    def _refuse(self, why: str) -> None:
        L.llama_model_free(self.model)
        raise DFlashError(f"{self.path.name}: {why}")

    def _load(self, options: LoadOptions) -> None:
        t = self.target
        why = eagle3rows.target_refusal(t, HeadKind.DFLASH)  # before anything is loaded or turned on
        if why is not None:
            raise DFlashError(f"{self.path.name}: {why}")
        t_arch = t.meta("general.architecture")
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if options.n_gpu_layers < 0 else options.n_gpu_layers
        mparams.load_mode = L.LLAMA_LOAD_MODE_MMAP if options.mmap else L.LLAMA_LOAD_MODE_NONE
        self._load_model(mparams)
        block = self.meta(f"{ARCH}.block_size")
        self.block = int(block) if block is not None else DEFAULT_BLOCK
        self.mask = int(L.llama_vocab_mask(self.vocab))
        why = drafter_refusal(None if block is None else self.block, self.mask, self.n_vocab,
                              int(self.meta(f"{ARCH}.selector_rank") or 0), self.dspark)
        if why is None and self.mask >= t.n_vocab:  # (its embedding is looked up in the target's table)
            why = f"its mask token ({self.mask}) is past the target's vocabulary of {t.n_vocab}"
        if why is not None:
            self._refuse(why)
        layers = eagle3rows.head_layers(self.model)
        n_embd_t = int(L.llama_model_n_embd(t.model))
        why = eagle3rows.refusal(t_arch, int(L.llama_model_n_layer(t.model)), n_embd_t, layers,
                                 int(L.llama_model_n_embd(self.model)), HeadKind.DFLASH)
        if why is None and t.hidden is not None and not (
                isinstance(t.hidden, LayerRows) and t.hidden.layers == tuple(layers)):
            why = ("the target keeps other rows (for its MTP head, an assistant drafter, an EAGLE-3 head or another "
                   "DFlash drafter): load the target without its MTP layers, or unload the other draft first")
        if why is not None:
            self._refuse(why)
        anchor = self.dspark and self.meta(f"{ARCH}.sample_from_anchor") in (None, "true")
        self.first = 0 if anchor else 1  # the block's first slot that is a draft
        cparams = L.llama_context_default_params()
        cparams.n_ctx = t.n_ctx + self.block  # positions as the target's, and a block past its last
        # non-causal attention takes a batch in one ubatch (llama.cpp asserts it): the block at least
        cparams.n_batch = cparams.n_ubatch = max(options.n_batch, self.block)
        cparams.n_seq_max = 1
        cparams.n_rs_seq = 0
        cparams.n_threads = cparams.n_threads_batch = self.n_threads = options.n_threads or t.n_threads
        cparams.ctx_other = t.ctx  # the target's token embeddings and output matrix, where it has none
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            self._refuse(f"llama.cpp could not tie the DFlash drafter to the target's context ({t.path.name})")
        L.llama_set_causal_attn(self.ctx, self.meta(f"{ARCH}.attention.causal") == "true")
        if t.hidden is None:  # the target's rows: for every token from now on (its cache restarts to have them)
            t.hidden = LayerRows(t.ctx, layers, n_embd_t)
            t.reset()
        assert isinstance(t.hidden, LayerRows)
        self.rows = t.hidden
        self.rows.heads += 1
        self.batch = L.llama_batch_ext_init(self.ctx)

    @property
    def max_draft(self) -> int:
        """The most tokens one block drafts: B - 1 (DFlash), B (DSpark reading from its anchor)."""
        return self.block - self.first

    @property
    def variant(self) -> str:
        return "DSpark" if self.dspark else "DFlash"

    # --- the drafting protocol (DFlashProposer drives it as the draft model's proposer drives a model) --------

    def _inject(self, start: int, stop: int) -> None:
        """Write the target's features at positions ``start … stop - 1`` into every layer's K/V (rows decoded)."""
        rows = self.rows
        assert rows is not None
        pos = (L.llama_pos * 4)()  # an M-RoPE drafter reads 4 positions per row
        for lo in range(start, stop, self.n_batch):
            chunk = np.ascontiguousarray(rows.buf[lo:min(lo + self.n_batch, stop)], dtype=np.float32)
            L.llama_batch_ext_clear(self.batch)
            for i in range(len(chunk)):
                embd = L.llama_embd(chunk[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, rows.n_embd)
                idx = L.llama_batch_ext_add_embd(self.batch, 0, embd)
                pos[0] = pos[1] = pos[2] = lo + i
                if idx < 0 or not L.llama_batch_ext_set_pos(self.batch, idx, pos):
                    raise BackendError(f"{self.path.name}: the features batch refused row {i} (code {idx})")
            rc = L.llama_process(self.ctx, L.LLAMA_PROCESS_TYPE_DECODE, self.batch)
            if rc != 0:
                raise BackendError(f"{self.path.name}: writing the target's features failed with code {rc}")

    def _block(self, anchor: int, at: int) -> np.ndarray:
        """Decode ``[anchor, MASK × (B - 1)]`` at ``at …``, remove it from the cache; a copy of the draft slots'
        logits (``max_draft`` rows)."""
        if at + self.block > self.n_ctx:
            raise ContextFullError(f"{at + self.block} positions exceed the drafter's context of {self.n_ctx}")
        pos = (L.llama_pos * 1)()
        L.llama_batch_ext_clear(self.batch)
        for i in range(self.block):
            idx = L.llama_batch_ext_add_token(self.batch, 0, int(anchor) if i == 0 else self.mask)
            pos[0] = at + i
            if idx < 0 or not L.llama_batch_ext_set_pos(self.batch, idx, pos) \
                    or not L.llama_batch_ext_set_output_logits(self.batch, idx, True):
                raise BackendError(f"{self.path.name}: the block's batch refused slot {i} (code {idx})")
        try:
            rc = L.llama_process(self.ctx, L.LLAMA_PROCESS_TYPE_DECODE, self.batch)
            if rc != 0:
                raise BackendError(f"{self.path.name}: the DFlash block's decode failed with code {rc}")
            return np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))
                             for i in range(self.first, self.block)])
        finally:  # the block never stays: the cache holds the target's features only
            if not L.llama_memory_seq_rm(self.mem, 0, at, -1):
                raise RollbackError(f"{self.path.name}: the DFlash drafter's cache refused to drop its block")

    def sync(self, tokens: Sequence[int], need_logits: bool = True) -> Optional[np.ndarray]:
        """Make the cache hold the target's features for ``tokens`` (with ``need_logits``: for all but the last,
        then draft the block after it and return its first draft slot's logits). The target must hold them."""
        n = len(tokens)
        m = n - 1 if need_logits and tokens else n
        if m > self.target.n_past:
            raise BackendError(f"the DFlash drafter needs the target's rows up to position {m - 1}")
        keep = common_prefix(self.cached, tokens[:m])
        self.rollback(keep)
        if m > keep:
            self._inject(keep, m)
            self.cached.extend(int(x) for x in tokens[keep:m])
        if not need_logits:
            return None
        if not tokens:
            return np.zeros(self.n_vocab, dtype=np.float32)
        self.slots = self._block(tokens[-1], n - 1)
        self.next_slot = 1
        return self.slots[0].copy()

    def decode(self, tokens: Sequence[int], logits_for: Sequence[int] = (-1,)) -> np.ndarray:
        """The next draft slot's logits as a (1, n_vocab) array (``tokens``: the one drafted before it, which the
        block's slots do not depend on)."""
        if len(tokens) != 1:
            raise BackendError("the DFlash drafter hands out one draft slot at a time")
        if self.next_slot >= len(self.slots):
            raise BackendError(f"a DFlash block drafts at most {self.max_draft} tokens")
        self.next_slot += 1
        return self.slots[self.next_slot - 1][None, :]

    def missing(self, tokens: Sequence[int]) -> int:
        """History tokens whose features the cache lacks (1 in steady state: the pending one, the block's anchor)."""
        return len(tokens) - common_prefix(self.cached, tokens)

    def rollback(self, n_keep: int) -> None:
        """Keep the features of the first ``n_keep`` tokens (a plain KV cache: checked)."""
        if n_keep >= len(self.cached):
            return
        if not L.llama_memory_seq_rm(self.mem, 0, n_keep, -1):
            raise RollbackError(f"{self.path.name}: the DFlash drafter's cache refused to roll back to {n_keep}")
        del self.cached[n_keep:]

    def time_block(self) -> float:
        """Seconds for one block after what the cache holds, the cache left as it was."""
        t0 = time.perf_counter()
        self._block(self.mask, len(self.cached))
        return time.perf_counter() - t0

    def reset(self) -> None:
        L.llama_memory_clear(self.mem, True)
        self.cached.clear()
        self.slots, self.next_slot = np.zeros((0, 0), dtype=np.float32), 0

    def close(self) -> None:
        if self._closed:
            return
        L.llama_batch_ext_free(self.batch)
        rows = self.rows
        if rows is not None:
            rows.heads -= 1
            if rows.heads == 0 and not self.target.closed:  # the last one turns them off
                rows.off()
                self.target.hidden = None
        super().close()


class DFlashProposer(MtpProposer):
    """A DFlash block drafts: the draft model's sampling, coupling, ``p_min`` rule and handoff, on
    :class:`DFlashModel`, at most one block a step. Its catch-up on the tokens just accepted is part of every
    step's work (MtpProposer's accounting)."""

    name: str = ProposerName.DRAFT

    def __init__(self, model: DFlashModel, p_min: float = 0.0, costs: Optional[ReadCosts] = None):
        super().__init__(model, p_min, costs=costs)
        self.drafter = model

    def propose(self, history: Sequence[int], k: int, sampler, rng, sample: bool, noise=None, handoff=None,
                reach: int = 0) -> Draft:
        """As the draft model's proposer, at most ``max_draft`` tokens (lookup's handoff may add its own)."""
        return super().propose(history, min(k, self.drafter.max_draft), sampler, rng, sample, noise,
                               handoff=handoff, reach=reach)

    def time_tokens(self, history: Sequence[int], k: int) -> float:
        """One block's seconds, whatever ``k``: a block drafts all its tokens in one pass."""
        return self.drafter.time_block() if k > 0 else 0.0
