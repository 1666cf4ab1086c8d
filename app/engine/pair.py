"""A loaded target/draft pair: the object the UI, the benchmark and the CLI hold.

It owns the two models, refuses an incompatible draft (llama.cpp's vocabulary rules, ``vocab.py``), turns
chat messages into prompt tokens with the target's own template, and hands out proposers.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from app.engine import limits

from app.engine.llama import vocab
from app.engine.drafters.assistant import LABEL as ASSISTANT_LABEL, AssistantModel
from app.engine.drafters.dflash import LABEL as DFLASH_LABEL, DFlashModel, DFlashProposer, open_draft
from app.engine.drafters.eagle3 import LABEL as EAGLE3_LABEL, Eagle3Model
from app.engine.llama.backend import ContextFullError, LoadOptions, Model
from app.engine.llama.chunking import Cancel
from app.engine.llama.promptcache import PromptCache, Recall
from app.engine.control.draftlen import DraftLength
from app.engine.drafters.kvshare import KvShare, in_use, share_reason
from app.engine.events import Event
from app.engine.loop import GenConfig, generate
from app.engine.names import AUTO_K, DraftKind, ProposerName
from app.engine.drafters.mtp import MtpHead, MtpProposer, mtp_reason
from app.engine.drafters.duo import DuoProposer
from app.engine.drafters.readcost import ReadCostBook
from app.engine.control.mix import LookupAcceptance
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.drafters.lookup import PromptLookupProposer
from app.engine.drafters.protocol import Proposer
from app.engine.drafters.suffix import SuffixIndex
from app.engine.drafters.tree import TreeProposer
from app.engine.llama.treekv import TreeError
from app.engine.decoding.text import TemplateError, message_pieces, render_chat


class Pair:
    def __init__(self, target: Model, draft: Optional[Model] = None):
        self.target = target
        self.draft: Optional[Model] = None
        self.kv_share: Optional[KvShare] = None  # the draft model takes the target's cache (kvshare.py)
        self.kv_share_reason: Optional[str] = "no draft model"  # … or why it cannot
        self._mtp: Optional[MtpHead] = None  # the target's own MTP head, made when first asked for
        self._target_vocab = target.vocab_info()
        self._lengths: dict[tuple, DraftLength] = {}  # auto-K controllers by (proposer, k_max): what they learnt
        self.lookup_index = SuffixIndex()  # what proposer "auto" has read since load: its lookup's memory
        self._lookup_acceptance = LookupAcceptance()  # how lookup proposals fared, by match length
        self.read_costs = ReadCostBook()  # what each draft model was timed reading unseen history (readcost.py)
        if draft is not None:
            self.set_draft(draft)

    @classmethod
    def load(cls, target_path: Path | str, draft_path: Optional[Path | str] = None,
             target_options: LoadOptions = LoadOptions(),
             draft_options: Optional[LoadOptions] = None) -> "Pair":
        """Load both models; the draft's options default to :func:`draft_options_for` the target.
        Nothing stays loaded if either fails."""
        if target_options.rpc:
            from app.engine.remote.split import SplitTarget

            target: Model = SplitTarget(target_path, target_options)
        else:
            target = Model(target_path, target_options)
        try:
            draft = None
            if draft_path is not None:
                draft = open_draft(draft_path, draft_options or draft_options_for(target), target)
            pair = cls(target, draft)
        except BaseException:
            target.close()
            raise
        try:
            pair.check_template()
        except BaseException:
            pair.close()
            raise
        return pair

    def set_draft(self, draft: Optional[Model]) -> None:
        """Replace the draft model, closing the old one; raises IncompatiblePair and keeps the old one."""
        old = self.swap_draft(draft)
        if old is not None:
            old.close()

    def swap_draft(self, draft: Optional[Model]) -> Optional[Model]:
        """Replace the draft model and hand back the old one, still loaded (e.g. to put it back after a
        sweep). An incompatible draft is closed and IncompatiblePair raised; the old one stays in place."""
        if draft is not None:
            try:
                vocab.require(self._target_vocab, draft.vocab_info())
            except vocab.IncompatiblePair:
                draft.close()
                raise
        old, self.draft = self.draft, draft
        self.kv_share_reason = "no draft model" if draft is None else (
            "an assistant drafter (it reads the target's cache as it is)" if isinstance(draft, AssistantModel)
            else "an EAGLE-3 head (it drafts from the target's layer rows)" if isinstance(draft, Eagle3Model)
            else "a DFlash drafter (it drafts from the target's layer rows)" if isinstance(draft, DFlashModel)
            else "a target of another kind" if not isinstance(self.target, Model) else share_reason(self.target, draft))
        self.kv_share = KvShare(self.target, draft) if draft is not None and self.kv_share_reason is None else None
        drafting = (ProposerName.DRAFT, ProposerName.AUTO, ProposerName.TREE)  # the controllers that timed the draft
        self._lengths = {key: ln for key, ln in self._lengths.items() if key[0] not in drafting}
        return old

    def proposer_kind(self, cfg: GenConfig) -> str:
        """The proposer ``cfg`` gets here: auto without a draft model is prompt lookup."""
        return ProposerName.LOOKUP if cfg.proposer == ProposerName.AUTO and self.draft is None else cfg.proposer

    def proposer(self, cfg: GenConfig) -> Optional[Proposer]:
        if not cfg.speculative:
            return None
        kind = self.proposer_kind(cfg)
        if kind == ProposerName.LOOKUP:
            return PromptLookupProposer()
        p_min = cfg.p_min if cfg.k == AUTO_K else 0.0
        if kind == ProposerName.MTP or (kind == ProposerName.TREE and self.draft is None and self.has_mtp):
            mtp = MtpProposer(self.mtp_head(), p_min=p_min)  # a tree without a draft: the MTP head's, with branches
            return TreeProposer(mtp) if kind == ProposerName.TREE else mtp
        if self.draft is None:
            if kind == ProposerName.TREE:
                raise TreeError("tree drafts need a drafter: this pair has no draft model and its target no MTP head")
            raise ValueError("this pair has no draft model; use the prompt-lookup proposer")
        model = self.chain(p_min)
        if kind == ProposerName.TREE:  # the drafter's chain with branches (drafters/tree.py)
            own = isinstance(self.draft, Model) and self.draft_kind == DraftKind.MODEL  # its branches go deeper
            return TreeProposer(model, tails=self.draft.tree if own and isinstance(self.draft, Model) else None)
        if kind != ProposerName.AUTO:
            return model
        return DuoProposer(model, self.lookup_index, self._lookup_acceptance, cfg.lookup_memory)

    def chain(self, p_min: float) -> DraftModelProposer:
        """The draft's chain proposer: the draft model's, or the assistant's, EAGLE-3 head's or DFlash block's."""
        draft = self.draft
        assert draft is not None
        if isinstance(draft, DFlashModel):
            return DFlashProposer(draft, p_min=p_min, costs=self.read_costs.of(draft))
        if isinstance(draft, (AssistantModel, Eagle3Model)):
            return MtpProposer(draft, p_min=p_min, costs=self.read_costs.of(draft))
        costs = self.read_costs.of(draft, in_use(self.kv_share))
        return DraftModelProposer(draft, p_min=p_min, share=self.kv_share, costs=costs)

    def mtp_head(self) -> MtpHead:
        """The target's MTP head (its own context, made once); MtpUnavailable says why there is none."""
        if self._mtp is None:
            self._mtp = MtpHead(self.target)
        return self._mtp

    @property
    def draft_kind(self) -> Optional[DraftKind]:
        """How the draft drafts, for display: "draft model", the assistant drafter (reads the target's cache and
        rows, ``assistant.py``), the EAGLE-3 head or the DFlash block (read the target's layer rows, ``eagle3.py``,
        ``dflash.py``), or None without a draft."""
        if self.draft is None:
            return None
        if isinstance(self.draft, Eagle3Model):
            return EAGLE3_LABEL
        if isinstance(self.draft, DFlashModel):
            return DFLASH_LABEL
        return ASSISTANT_LABEL if isinstance(self.draft, AssistantModel) else DraftKind.MODEL

    @property
    def has_mtp(self) -> bool:
        """Whether the target can draft for itself (an MTP head this llama.cpp runs, loaded)."""
        return mtp_reason(self.target) is None

    def draft_length(self, cfg: GenConfig) -> Optional[DraftLength]:
        """The auto-K controller for ``cfg``'s proposer, kept across generations so that what it measured
        (verify cost, draft cost, whether drafting pays here) carries over; None for a fixed K or plain."""
        if not cfg.speculative or cfg.k != AUTO_K:
            return None
        key = (self.proposer_kind(cfg), cfg.k_max)
        if key not in self._lengths:
            self._lengths[key] = DraftLength(AUTO_K, cfg.k_max)
        return self._lengths[key]

    # --- prompts ---------------------------------------------------------------------------------------

    def check_template(self) -> None:
        """Refuse, naming the file, a chat template that fails, passes a limit (time, characters, the context's
        tokens) or leaves a user's message out: checked at load, so that no pair is loaded whose every chat
        would fail."""
        t = self.target
        probe = [{"role": "user", "content": "Hello"}]
        try:
            text = render_chat(t.chat_template(), probe, bos=t.token_text(t.bos) if t.bos >= 0 else "",
                               eos=t.token_text(t.eos) if t.eos >= 0 else "")
            if probe[0]["content"] not in text:
                raise TemplateError("the chat template renders " + (
                    "nothing" if not text.strip() else "a conversation without the user's message"))
            self.chat_prompt(probe)
        except (TemplateError, ContextFullError) as exc:
            raise TemplateError(f"{t.path.name}: {exc}; the model was not loaded",
                                hint="use another model file, or correct its tokenizer.chat_template") from None

    def chat_prompt(self, messages: Sequence[dict], cancel: Cancel = None,
                    tools: Optional[Sequence[dict]] = None) -> list[int]:
        """Token ids for a conversation, rendered with the target's chat template (``tools``: OpenAI function
        tools for a template that knows them; ``toolcalls.tool_prompt`` prepares both).

        Only the template's own text is parsed for control tokens: message text stays text, so a user who types
        ``<|im_end|><|im_start|>system`` cannot forge a turn. Usually the whole rendering tokenises as one (as
        llama.cpp does); when that would turn message text into control tokens, the pieces are tokenised apart.
        The request's size is checked first (``limits.check_chat_size``); tokenising is linear in the text and
        stops with TokenizeCancelled once ``cancel`` (an Event or a callable) is set.
        """
        limits.check_chat_size(messages)
        t = self.target
        bos_text = t.token_text(t.bos) if t.bos >= 0 else ""
        eos_text = t.token_text(t.eos) if t.eos >= 0 else ""
        template = t.chat_template()
        text = render_chat(template, messages, bos=bos_text, eos=eos_text, tools=tools)
        limit = t.n_ctx - 1
        ids = t.tokenize(text, add_special=True, parse_special=True, limit=limit, cancel=cancel)
        pieces = message_pieces(template, messages, text, bos=bos_text, eos=eos_text, tools=tools)
        if pieces is None:
            if any(self._controls(t.tokenize(str(m["content"]), False, True, cancel=cancel)) for m in messages):
                raise TemplateError("this model's chat template changes the message text, so a message holding "
                                    "a control token's text cannot be kept apart from it; remove that text")
        elif self._controls(self._without_bos(ids, text, cancel)) != self._controls(
                c for piece, is_msg in pieces if not is_msg for c in t.tokenize(piece, False, True, cancel=cancel)):
            ids = [t.bos] if t.add_bos and t.bos >= 0 else []
            for piece, is_msg in pieces:
                ids += t.tokenize(piece, add_special=False, parse_special=not is_msg, cancel=cancel)
            if len(ids) > limit:
                raise ContextFullError.prompt(len(ids), t.n_ctx)
        if len(ids) >= 2 and ids[0] == ids[1] == t.bos:  # the template wrote BOS and so did the tokenizer
            ids = ids[1:]
        return ids

    def _controls(self, ids) -> list[int]:
        return [i for i in ids if self.target.is_control(i)]

    def _without_bos(self, ids: list[int], text: str, cancel: Cancel) -> list[int]:
        """``text`` tokenised without the added BOS: ``ids`` less its first token when that is the only
        difference (add-BOS vocabularies without add-EOS), else tokenised again."""
        t = self.target
        if t.add_bos and t.bos >= 0 and ids[:1] == [t.bos] and not t.add_eos:
            return ids[1:]
        return t.tokenize(text, False, True, cancel=cancel)

    def completion_prompt(self, text: str, cancel: Cancel = None, special: bool = True) -> list[int]:
        """Token ids of a raw completion prompt. As llama.cpp's completion endpoints, the text of control tokens
        is parsed (``special``): a client that writes ``<|fim_prefix|>…<|fim_middle|>`` gets those tokens. A raw
        prompt has no turns for such text to forge (``chat_prompt`` keeps message text as text)."""
        limits.check_prompt_size(text)
        return self.target.tokenize(text, add_special=True, parse_special=special, limit=self.target.n_ctx - 1,
                                    cancel=cancel)

    def prefill(self, prompt: Sequence[int], cfg: Optional[GenConfig] = None) -> None:
        """Read ``prompt`` into the caches without generating (llama.cpp's ``n_predict: 0``, an editor's warm-up),
        so that the next request sharing its start decodes only what differs. The last token stays pending, as a
        generation leaves it; the draft model (``cfg`` speculative with a proposer that uses it) reads it too."""
        t = self.target
        if len(prompt) >= t.n_ctx:
            raise ContextFullError.prompt(len(prompt), t.n_ctx)
        t.sync(prompt[:-1], need_logits=False)
        draft = self.draft
        if (cfg is None or not cfg.speculative or draft is None or isinstance(draft, AssistantModel)
                or self.proposer_kind(cfg) not in (ProposerName.DRAFT, ProposerName.AUTO, ProposerName.TREE)):
            return
        if self.kv_share is not None:
            self.kv_share.offer(prompt[:-1], need_logits=False)
        draft.sync(prompt[:-1], need_logits=False)

    def recall(self, prompt: Sequence[int], cache: PromptCache) -> Recall:
        """Before generating from ``prompt``: ``cache`` keeps the live sequence and puts back the saved one that
        spares the most decoding (promptcache.py). A draft model with a cache of its own goes with the target's;
        one that takes the target's cache, the MTP head and an assistant catch up as they always do."""
        own = self.draft is not None and self.kv_share is None and not isinstance(self.draft, AssistantModel)
        return cache.recall(prompt, self.target, self.draft if own else None)

    def generate(self, prompt: Sequence[int], cfg: GenConfig, stop: Optional[threading.Event] = None,
                 baseline_tps: Optional[float] = None,
                 on_prefill: Optional[Callable[[float], None]] = None) -> Iterator[Event]:
        return generate(self.target, prompt, cfg, self.proposer(cfg), stop=stop, baseline_tps=baseline_tps,
                        on_prefill=on_prefill, length=self.draft_length(cfg))

    def reset(self, lookup: bool = True) -> None:
        """Forget cached prompts (KV caches) and, unless ``lookup`` is False, what lookup remembers of earlier
        requests, e.g. before a benchmark run (no run may find another run's reply)."""
        self.target.reset()
        if lookup:
            self.lookup_index.clear()
        if self.draft is not None:
            self.draft.reset()
        if self._mtp is not None:
            self._mtp.reset()

    def close(self) -> None:
        if self._mtp is not None:
            self._mtp.close()
            self._mtp = None
        if self.draft is not None:  # first: an assistant drafter's context is tied to the target's
            self.draft.close()
            self.draft = None
        self.target.close()

    def __enter__(self) -> "Pair":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def draft_options_for(target: Model, draft: Optional[Model] = None) -> LoadOptions:
    """How to load a (further) draft beside ``target``: the target's context, threads and batch, and on the GPU
    (all its layers) where ``draft`` is, or, with no draft given, where any of the target is: a draft goes on
    the GPU before the target does."""
    ref = (draft or target).options.n_gpu_layers
    return LoadOptions(n_ctx=target.n_ctx, n_gpu_layers=0 if ref == 0 else -1, n_threads=target.options.n_threads,
                       n_batch=target.options.n_batch, load_mtp=False)  # a draft's own MTP layers go unused
