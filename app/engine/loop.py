"""The decode loop: plain and speculative decoding as one generator of events.

Each step: the proposer drafts up to K tokens (cut after an end-of-generation token: nothing after it can be
emitted); the target decodes ``[last] + draft`` in one ``llama_decode``
with logits for those K+1 rows only; a verification rule (``verify.py``) accepts a prefix and supplies the
next token; the target's KV cache is rolled back past the rejected tokens (checked). Speculation off is the
same loop with an empty draft, so plain and speculative decoding share every line that could change output.

The target is anything with the ``Target`` protocol (``target.py``): the loaded ``Model``, or a fake in tests.
Invariant: the target's KV cache holds ``tokens[:-1]``; ``tokens[-1]`` is the pending token whose logits the
next pass computes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from app.engine import limits
from app.engine.llama.backend import ContextFullError, RollbackError
from app.engine.decoding.coupled import GumbelNoise, NoiseRows, coupled_accept, coupled_accept_by
from app.engine.control.draftlen import DraftLength
from app.engine.events import (ACCEPTED, BONUS, CORRECTED, LOOKUP, MODEL, PLAIN, DoneEvent, Event, StepEvent,
                               StopReason, TokenEvent)
from app.engine.decoding.grammar import GrammarSpec, GrammarTrack, MaskedRows, compile_grammar
from app.engine.decoding.logprobs import MAX_TOP, token_logprob
from app.engine.drafters.lookup import PromptLookupProposer
from app.engine.drafters.protocol import Draft, Proposer, end_of_reply
from app.engine.names import AUTO_K, LOOKUP_MEMORIES, PROPOSERS, RULES, LookupMemory, ProposerName, Rule
from app.engine.decoding.sampling import SamplerSettings, distribution, greedy_token, make_rng, recent_window
from app.engine.stats import Stats, Summary
from app.engine.target import Target, TreePasses
from app.engine.decoding.text import Utf8Stream
from app.engine.decoding.tree import TreeStep, chain_tree, cut_siblings, judge_tree, node_probs
from app.engine.llama.treekv import TreeError
from app.engine.decoding.verify import greedy_accept, rejection_sample, sample_and_match

# Defaults measured on the demo pair (2-core CPU, 256 tokens, T=0); see docs/drafters.md, "Choosing K".
DEFAULT_K_MAX = 16
DEFAULT_P_MIN = 0.0


@dataclass(frozen=True)
class GenConfig:
    max_tokens: int = 256
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    speculative: bool = True
    proposer: str = ProposerName.AUTO  # who drafts (names.ProposerName; a str enum, so the words users type work)
    k: Union[int, str] = AUTO_K  # a fixed draft length, or AUTO_K ("auto")
    k_max: int = DEFAULT_K_MAX  # ceiling for auto
    p_min: float = DEFAULT_P_MIN  # auto: stop drafting below this draft confidence
    rule: str = Rule.REJECTION  # T > 0: the verification rule (names.Rule)
    grammar: Optional[GrammarSpec] = None  # the output must match this grammar (grammar.py)
    logprobs: Optional[int] = None  # None: off; n (0..20): each token's logprob and the n likeliest tokens
    # llama.cpp server's ignore_eos (end-of-generation tokens never chosen) and vLLM's min_tokens (not before this
    # many tokens): the target's end-of-generation logits are -inf, as llama.cpp's EOG logit bias makes them
    ignore_eos: bool = False
    min_tokens: int = 0
    # what proposer auto's lookup may copy: this request's text, or also the earlier requests the pair served
    # (their copies are counted apart: ``StepEvent.lookup_earlier``)
    lookup_memory: LookupMemory = LookupMemory.CONVERSATION

    def validate(self) -> "GenConfig":
        """Raise ValueError (``limits.LimitError``) naming a setting outside its documented range."""
        self.sampler.validate()
        limits.check("max_tokens", self.max_tokens)
        limits.k_setting(self.k)
        limits.check("k_max", self.k_max)
        limits.check("p_min", self.p_min)
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, not {self.rule!r}")
        if self.proposer not in PROPOSERS:
            raise ValueError(f"proposer must be one of {PROPOSERS}, not {self.proposer!r}")
        if self.logprobs is not None and not (isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_TOP):
            raise ValueError(f"top_logprobs must be an integer between 0 and {MAX_TOP}, not {self.logprobs!r}")
        if self.grammar is not None:
            self.grammar.to_gbnf()  # a schema the converter cannot express fails here
        if not (isinstance(self.min_tokens, int) and 0 <= self.min_tokens <= self.max_tokens):
            raise limits.LimitError(f"min_tokens must be an integer from 0 to max_tokens ({self.max_tokens}), not "
                                    f"{limits.shown(self.min_tokens)}", param="min_tokens")
        if self.lookup_memory not in LOOKUP_MEMORIES:
            raise limits.LimitError(f"lookup_memory must be one of {', '.join(LOOKUP_MEMORIES)}, not "
                                    f"{limits.shown(self.lookup_memory)}", param="lookup_memory")
        if self.grammar is not None and self.proposer == ProposerName.TREE:
            raise limits.LimitError("tree drafts do not combine with a grammar, a schema or tools", param="proposer")
        if self.grammar is not None and (self.ignore_eos or self.min_tokens):
            raise limits.LimitError("ignore_eos and min_tokens cannot be combined with a grammar, a JSON schema or "
                                    "tools: the grammar decides where the reply ends", param="ignore_eos"
                                    if self.ignore_eos else "min_tokens")
        return self


class _Rows:
    """Target distributions computed on first use (a rejection at position i never needs rows > i)."""

    def __init__(self, logits: Union[np.ndarray, MaskedRows], sampler: SamplerSettings, history: Sequence[int],
                 draft: Sequence[int]):
        self.logits, self.sampler, self.history, self.draft = logits, sampler, history, draft
        self.cache: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self.cache:
            context = list(recent_window(self.history, self.sampler)) + list(self.draft[:i])
            self.cache[i] = distribution(self.logits[i], self.sampler, context)
        return self.cache[i]

    def __len__(self) -> int:
        return len(self.draft) + 1


def judge(logits: Union[np.ndarray, MaskedRows], draft: Draft, history: Sequence[int], cfg: GenConfig,
          rng: np.random.Generator, noise: Optional[GumbelNoise] = None) -> tuple[int, int]:
    """(accepted count, next token) for one verification pass; ``logits`` has len(draft) + 1 rows (an array, or
    rows masked by a grammar on first use); ``noise``: the coupled rule's Gumbel noise."""
    s = cfg.sampler
    if s.greedy:
        if s.repeat_penalty == 1.0:
            best = np.argmax(logits, axis=1).tolist()
        else:
            recent = list(recent_window(history, s))
            best = [greedy_token(logits[i], s, recent + draft.tokens[:i]) for i in range(len(logits))]
        n = greedy_accept(draft.tokens, best)
        return n, best[n]
    p = _Rows(logits, s, history, draft.tokens)
    if cfg.rule == Rule.MATCH:
        return sample_and_match(p, draft.tokens, rng)
    if cfg.rule == Rule.COUPLED and noise is not None:
        g = NoiseRows(noise, len(history), logits.shape[1])
        untransformed = s.top_k == 0 and s.top_p == 1.0 and s.min_p == 0.0 and s.repeat_penalty == 1.0
        if isinstance(logits, MaskedRows) and untransformed:  # a grammar: no full mask where it can be helped
            return coupled_accept_by(lambda i: logits.gumbel_max(i, s.temperature, g[i]), draft.tokens)
        return coupled_accept(p, draft.tokens, g)
    return rejection_sample(p, draft.q, draft.tokens, rng)


def generate(target: Target, prompt: Sequence[int], cfg: GenConfig, proposer: Optional[Proposer] = None,
             stop: Optional[threading.Event] = None, baseline_tps: Optional[float] = None,
             on_prefill: Optional[Callable[[float], None]] = None,
             length: Optional[DraftLength] = None) -> Iterator[Event]:
    """Generate from ``prompt`` (token ids); yields TokenEvents and StepEvents, then one DoneEvent.

    ``proposer`` is used when ``cfg.speculative``; ``stop`` ends generation at the next step boundary;
    ``baseline_tps`` (plain tokens/s of this target here) lets the final stats carry speedup, c, v and bound;
    ``length``: a draft-length controller that carries what earlier generations measured (a fresh one for
    ``cfg.k`` if None). Raises ContextFullError (prompt too long), RollbackError (speculation on recurrent
    memory) and GrammarError (a grammar llama.cpp cannot parse) up front.
    """
    gen = _Run.start(target, prompt, cfg, proposer if cfg.speculative else None, length)
    t0 = time.perf_counter()
    target.sync(prompt[:-1], need_logits=False)
    if gen.spec is not None:  # paused on a cost, or its reading could not pay: it catches up if drafting resumes
        gen.spec.begin(prompt, warm=gen.length.warm and gen.reads)
    if on_prefill:
        on_prefill(time.perf_counter() - t0)

    while gen.reason is None:
        if stop is not None and stop.is_set():
            gen.reason = StopReason.STOPPED
            break
        t_step = time.perf_counter()
        room = target.n_ctx - len(gen.tokens)  # KV after the pass: len(tokens) + len(draft)
        if room < 1:
            gen.reason = StopReason.CONTEXT
            break
        k, source, draft = gen.draft(room)
        n, nxt, logits, t_verify = gen.verify(draft)
        events = gen.emit(gen.shown(draft), n, nxt, logits)
        step_ev = gen.report(k, source, draft, n, len(events), t_verify, t_step)
        gen.text.extend(e.text for e in events)
        yield from events
        yield step_ev
    yield from gen.done(baseline_tps)


@dataclass
class _Run:
    """One generation's state between its steps (:func:`generate` drives it)."""

    target: Target
    prompt: Sequence[int]
    cfg: GenConfig
    spec: Optional[Proposer]  # who drafts (None: plain decoding)
    length: DraftLength
    rng: np.random.Generator
    reach: Optional[int]  # recurrent memory drops at most this many tokens a pass (None: any)
    sample_draft: bool  # drafts are sampled from q (rejection sampling and the coupled rule at T > 0)
    track: Optional[GrammarTrack]  # the grammar the output must match
    noise: Optional[GumbelNoise]  # the coupled rule's noise
    mixes: bool  # the proposer chooses its drafter per step (duo.py): it may draft up to the controller's ceiling
    reads: bool = True  # the draft reading the prompt can pay back in this generation (DraftLength.worth_reading)
    free: Optional[Proposer] = None  # prompt lookup for the controller's free probes
    tokens: list[int] = field(default_factory=list)  # the prompt and the reply so far
    stream: Utf8Stream = field(default_factory=Utf8Stream)
    stats: Stats = field(default_factory=Stats)
    text: list[str] = field(default_factory=list)
    emitted: int = 0
    step: int = 0
    reason: Optional[StopReason] = None
    end: Optional[int] = None  # the end-of-generation token the target chose, if it ended so
    eog: Optional[list[int]] = None  # the vocabulary's end-of-generation tokens, read when first masked
    walked: Optional[TreeStep] = None  # this step's tree and the path its pass kept (None: a chain)

    @classmethod
    def start(cls, target: Target, prompt: Sequence[int], cfg: GenConfig, spec: Optional[Proposer],
              length: Optional[DraftLength]) -> "_Run":
        """Check the request, then set up the sampler, grammar, noise and controller (bound to ``spec``)."""
        cfg.validate()
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= target.n_ctx:
            raise ContextFullError.prompt(len(prompt), target.n_ctx)
        reach = target.rollback_limit
        if spec is not None and target.recurrent and not reach:
            raise RollbackError(f"{target.path.name} has recurrent/hybrid memory of an architecture whose state "
                                "llama.cpp cannot roll back; turn speculation off for this model")
        if spec is not None and spec.name == ProposerName.TREE and target.tree is None:
            raise TreeError(f"{target.path.name} cannot verify tree drafts: {target.tree_refusal}")
        rng = make_rng(cfg.sampler)
        sample_draft = not cfg.sampler.greedy and cfg.rule in (Rule.REJECTION, Rule.COUPLED)
        track = GrammarTrack(compile_grammar(target, cfg.grammar)) if cfg.grammar is not None else None
        noise = None
        if cfg.rule == Rule.COUPLED and not cfg.sampler.greedy:
            seed = cfg.sampler.seed if cfg.sampler.seed is not None else int(rng.integers(2 ** 63))
            noise = GumbelNoise(seed)
        length = length or DraftLength(cfg.k, cfg.k_max)
        reads = spec is None or length.worth_reading(spec.catch_up(prompt, length.t_d or 0.0)[1], cfg.max_tokens)
        length.begin(retest=reads)
        if spec is not None:
            if spec.retest_tokens and reads:  # its acceptance was measured on another text: a pause on it is re-tested
                length.retest(spec.retest_tokens)
            spec.bind(length)  # a mixing proposer reads the controller
        return cls(target, prompt, cfg, spec, length, rng, reach, sample_draft, track, noise,
                   mixes=spec is not None and spec.mixes, reads=reads, tokens=list(prompt))

    def draft(self, room: int) -> tuple[int, Optional[Proposer], Draft]:
        """(the controller's draft limit, who drafted, the draft): cut where the grammar refuses a token and
        after an end-of-generation token."""
        spec, length, cfg = self.spec, self.length, self.cfg
        cap = min(cfg.max_tokens - self.emitted - 1, room - 1, self.reach or room) if spec is not None else 0
        if spec is not None and cap > 0 and length.auto and length.reads:  # the draft's reading against what is left
            unread, seconds = spec.catch_up(self.tokens, length.t_d or 0.0)
            length.hold(seconds, cfg.max_tokens - self.emitted, unread)
        k = min(length.k, cap)
        source = spec
        if k > 0 and length.free_probe and spec.name != ProposerName.LOOKUP:
            if self.free is None:
                self.free = PromptLookupProposer()
                self.free.begin(self.prompt)
            source = self.free
        coupling = {"noise": self.noise} if self.noise is not None and source is not None and source.couples else {}
        limit = min(length.k_max, cap) if self.mixes and source is spec and not length.wake else k
        draft = source.propose(self.tokens, limit, cfg.sampler, self.rng, self.sample_draft, **coupling) \
            if limit > 0 else Draft()
        if self.track is not None:
            draft = _cut(draft, self.track.cut(draft.tokens))
        draft = _cut(draft, end_of_reply(draft.tokens, self.target.is_eog) or len(draft.tokens))
        if k == 0 and spec is not None and length.wake:
            draft.seconds = spec.time_tokens(self.tokens, length.wake)  # re-measure the sleeping draft's cost
        return k, source, draft

    def verify(self, draft: Draft) -> tuple[int, int, np.ndarray, float]:
        """The target's pass over ``[last] + draft``, judged and rolled back past the rejected tokens: (accepted
        count, next token, the pass's logits, its seconds). A tree draft: :meth:`verify_tree`."""
        target, cfg, track = self.target, self.cfg, self.track
        t_pass = time.perf_counter()
        self.walked = None
        # (near the context's end the branches are left out)
        if draft.siblings and target.tree is not None and len(self.tokens) + draft.nodes <= target.n_ctx:
            return self.verify_tree(draft, target.tree, t_pass)
        batch = [self.tokens[-1]] + draft.tokens
        logits = self.no_end(target.decode(batch, range(len(batch))))
        plain_argmax = cfg.sampler.greedy and cfg.sampler.repeat_penalty == 1.0
        rows = logits if track is None else track.rows(logits, plain_argmax)
        n, nxt = judge(rows, draft, self.tokens, cfg, self.rng, self.noise)
        if track is not None:
            track.advance(n, nxt, target.is_eog(nxt))
        target.rollback(len(self.tokens) + n)
        return n, nxt, logits, time.perf_counter() - t_pass

    def verify_tree(self, draft: Draft, passes: TreePasses, t_pass: float) -> tuple[int, int, np.ndarray, float]:
        """:meth:`verify` of a tree (a chain and its siblings, ``decoding/tree.py``); the kept path: :attr:`walked`."""
        tree = chain_tree(draft.tokens, draft.q, draft.siblings)
        batch = [self.tokens[-1]] + tree.tokens
        depths = [0] + [tree.depth(v) for v in range(len(tree))]
        logits = self.no_end(passes.decode(batch, [-1] + [p + 1 for p in tree.parents]), depths)
        walk = judge_tree(logits, tree, self.tokens, self.cfg.sampler, Rule(self.cfg.rule), self.rng, self.noise)
        passes.keep(batch, [v + 1 for v in walk.path])
        self.walked = TreeStep(tree, walk, len(draft.tokens))
        rows = np.array(logits[[0] + [v + 1 for v in walk.path]], copy=True)
        return len(walk.path), walk.token, rows, time.perf_counter() - t_pass

    def no_end(self, logits: np.ndarray, depths: Optional[Sequence[int]] = None) -> np.ndarray:
        """``logits`` with the end-of-generation tokens at -inf in the rows that must not end the reply
        (``ignore_eos``: all of them; ``min_tokens``: those before it), so every rule at every temperature, and
        the draft's verification, treat them as impossible. ``depths``: a tree pass's rows' (a chain's: 0, 1, ...)."""
        limit = len(logits) if self.cfg.ignore_eos else self.cfg.min_tokens - self.emitted
        rows = [i for i, d in enumerate(range(len(logits)) if depths is None else depths) if d < limit]
        if not rows:
            return logits
        if self.eog is None:
            self.eog = [t for t in range(logits.shape[1]) if self.target.is_eog(t)]
        logits = np.array(logits, copy=True)
        logits[np.ix_(rows, self.eog)] = -np.inf
        return logits

    def shown(self, draft: Draft) -> Draft:
        """The draft as :meth:`emit` reads it: a tree's kept path and the child turned down after it, if any."""
        if self.walked is None:
            return draft
        tokens, probs = self.walked.shown(node_probs(draft.probs, draft.siblings))
        return Draft(tokens=tokens, probs=probs, seconds=draft.seconds)

    def emit(self, draft: Draft, n: int, nxt: int, logits: np.ndarray) -> list[TokenEvent]:
        """The pass's tokens (the ``n`` kept, then ``nxt``) as events, up to an end of generation or the budget."""
        cfg, target = self.cfg, self.target
        events: list[TokenEvent] = []
        for i, tok in enumerate(draft.tokens[:n] + [nxt]):
            if target.is_eog(tok):
                self.reason, self.end = StopReason.EOG, tok
                break
            kind = ACCEPTED if i < n else (CORRECTED if n < len(draft.tokens) else (BONUS if draft.tokens else PLAIN))
            self.tokens.append(tok)
            events.append(TokenEvent(
                token=tok, text=self.stream.feed(target.piece(tok)), kind=kind, step=self.step,
                draft_pos=i if i < len(draft.tokens) else None,
                draft_prob=draft.probs[i] if i < len(draft.probs) else None, index=self.emitted,
                draft_token=draft.tokens[i] if kind == CORRECTED and i < len(draft.tokens) else None,
                drafter=(LOOKUP if draft.from_lookup(i) else MODEL) if i < len(draft.tokens) else None,
                logprob=token_logprob(logits[i], tok, cfg.logprobs) if cfg.logprobs is not None else None,
            ))
            self.emitted += 1
            if self.emitted >= cfg.max_tokens:
                self.reason = StopReason.MAX_TOKENS
                break
        return events

    def report(self, k: int, source: Optional[Proposer], draft: Draft, n: int, emitted: int, t_verify: float,
               t_step: float) -> StepEvent:
        """Tell the controller how the step went; the step's event, counted in the stats."""
        spec, length = self.spec, self.length
        probe = spec is not None and length.probing and bool(draft.tokens)  # (a probe may find nothing)
        paused = spec is not None and length.paused and not draft.tokens
        why = length.limit() if paused else None  # why this step was plain (the update may resume drafting)
        woke = spec is not None and k == 0 and bool(length.wake)  # (as ``draft`` read it: the update moves on)
        free_probe = source is not None and source is self.free and bool(draft.tokens)
        mixed = self.mixes and source is spec  # lookup's tokens (before or after the model's) are free for the controller
        tree = self.walked or TreeStep()
        if self.walked is not None and length.auto and length.measured():  # what a branch brings, and costs
            length.branches.learn(tree.siblings, tree.hit, t_verify - length.verify()(len(tree.tree) + 1))
        length.update(len(draft.tokens), min(n, tree.chain_kept), draft.seconds, t_verify, draft.synced,
                      t_sync=draft.t_aside, free=draft.lookup if mixed else 0, tail=draft.tail if mixed else 0,
                      extra=tree.offered)
        step_ev = StepEvent(step=self.step, drafted=len(draft.tokens) + tree.offered, accepted=n, emitted=emitted,
                            t_draft=draft.seconds, t_verify=t_verify, k=k, t_step=time.perf_counter() - t_step,
                            paused=paused, probe=probe, limit=why, lookup=draft.lookup + draft.tail,
                            lookup_accepted=draft.lookup_kept(n), t_sync=draft.t_sync, wake=woke,
                            lookup_earlier=draft.earlier_kept(n),
                            free_probe=free_probe, tree=tree.offered, branch_hit=tree.hit is not None,
                            branches=tree.nodes(self.target.piece) if tree.offered else ())
        self.stats.add(step_ev)
        self.step += 1
        return step_ev

    def done(self, baseline_tps: Optional[float]) -> Iterator[Event]:
        """The end: the proposer told where the reply ended, the text's last bytes, the DoneEvent."""
        if self.spec is not None:
            self.spec.finish(self.tokens, self.end)  # a mixing proposer's lookup remembers the reply's last tokens
        self.stream.flush()  # a character the reply's end cut in half is dropped, not shown as U+FFFD
        self.stats.end(self.length.limit())
        yield DoneEvent(reason=self.reason or StopReason.STOPPED, stats=self.stats.summary(baseline_tps),
                        text="".join(self.text), tokens=tuple(self.tokens[len(self.prompt):]))


def _cut(draft: Draft, n: int) -> Draft:
    """The draft's first ``n`` tokens (those a grammar allows, those up to an end of generation), their siblings."""
    if n == len(draft.tokens):
        return draft
    return replace(draft, tokens=draft.tokens[:n], q=None if draft.q is None else draft.q[:n], probs=draft.probs[:n],
                   lookup=min(draft.lookup, n), tail=max(0, draft.tail - (len(draft.tokens) - n)),
                   siblings=cut_siblings(draft.siblings, n))


def run(target: Target, prompt: Sequence[int], cfg: GenConfig, proposer: Optional[Proposer] = None,
        baseline_tps: Optional[float] = None, length: Optional[DraftLength] = None,
        steps: Optional[list[StepEvent]] = None) -> tuple[list[int], Summary]:
    """Run a whole generation; (generated token ids, stats summary, with speedup if a baseline is given).
    ``steps``: a list that receives the generation's step events."""
    done = None
    for ev in generate(target, prompt, cfg, proposer, baseline_tps=baseline_tps, length=length):
        if isinstance(ev, DoneEvent):
            done = ev
        elif steps is not None and isinstance(ev, StepEvent):
            steps.append(ev)
    assert done is not None
    return list(done.tokens), done.stats
