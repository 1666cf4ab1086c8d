"""The combined drafter (``proposer="auto"``): prompt lookup where the text repeats, the draft model elsewhere,
chosen per step from measured costs (``mix.py``), through the same verify and rollback as either alone.

Lookup reads a :class:`~app.engine.drafters.suffix.SuffixIndex` that holds the current context and the earlier prompts
and replies this pair served (the ``Pair`` owns it). What it may copy from is the request's choice
(``GenConfig.lookup_memory``): its own text alone (the default: a chat's earlier turns are in its prompt), or also
the earlier requests, so that a second request about the same code finds the first answer's text; tokens so
copied are marked (``Draft.earlier_head`` / ``earlier_tail``) and counted apart, since what they save is a
repeat of earlier work. Lookup tokens are deterministic (q = one-hot: ``None`` rows in ``Draft.q``); draft-model tokens
carry the draft's distributions, conditioned on the lookup tokens before them, so exact rejection sampling
holds for the mixture position by position.

While the draft model drafts, it asks after each token whether the tokens so far rejoin an earlier text
(``SuffixIndex.longest(after=...)``: a renamed word typed, the copy resumes) and hands the rest of the proposal
to lookup when that is worth more than drafting on (``mix.hand_over``): one verify pass then carries the edit
and the copy after it. Which lookup tokens follow is a function of the tokens before them, so they too are
deterministic proposals (``Draft.tail`` says which).

Where the reply broke off a copy and rejoined it (a renamed variable), what it wrote instead is learnt for the
rest of the reply and lookup's later continuations of that source are rewritten with it (``rewrite.py``).

The draft-length controller (``draftlen.DraftLength``) still owns the draft model's K, its pauses and probes;
this proposer reads it (``bind``) and follows it while it probes or has not measured yet. Lookup steps report
their verify passes to the controller (the verify cost fit learns from them) but not as the draft's
acceptance or cost (``Draft.lookup`` tokens are *free* for it). How each lookup proposal fared is read back
from the history at the next step, per match length.

Design note: after a lookup stretch the draft model reads every token it has not seen. Reading only the last
few and leaving a hole in its context (its cache then holds the history with gaps) would cost less to read,
but a draft model conditioned on a history with a hole guesses worse (``scripts/draft_context.py`` measures
its greedy agreement both ways), and the mix then fills lookup's gaps with plain steps instead of drafts:
reading everything paid, so there is no such window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from app.engine.decoding.coupled import GumbelNoise
from app.engine.control.draftlen import DraftLength
from app.engine.control.mix import Choice, LookupAcceptance, LookupRisk, choose, hand_over, reading
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.drafters.protocol import Draft, ProposerBase, end_of_reply
from app.engine.drafters.readcost import ReadCosts
from app.engine.drafters.rewrite import Rewrites
from app.engine.decoding.sampling import SamplerSettings
from app.engine.drafters.suffix import Match, SuffixIndex
from app.engine.control.verifycost import VerifyCost
from app.engine.names import LookupMemory, ProposerName

FIXED_MIN_MATCH = 4  # a fixed K (no cost estimates): lookup proposes where its match is at least this long
# A return to the draft model after a lookup stretch is charged its catch-up shared over the draft steps that
# follow it: the mean of the recent runs, with this prior (one run of it) before any was seen.
RUNS_PRIOR = 4.0


@dataclass(frozen=True)
class Proposal:
    """One step's lookup proposal, judged at the next step (``_learn``): made when the history held ``start``
    tokens, ``tokens`` proposed from there (lookup's from ``begin``: a handoff's draft-model tokens come first),
    from a match of ``match_len`` tokens; ``src``: each lookup token's source position (None where a rewrite
    put it: rewrite.py)."""

    start: int
    tokens: tuple
    begin: int
    match_len: int
    src: tuple = ()
    alone: bool = False  # the pass carried these lookup tokens and nothing else (LookupRisk judges it)


@dataclass(frozen=True)
class Prices:
    """What one step's choices weigh, read once: a target pass's cost ``tv(n)`` (verifycost.py), a draft token
    ``t_d``, the draft model's reading (``t_s``, ``t_c``: mix.reading), its acceptance ``alpha_d`` and the history
    tokens it has not read (``pending``)."""

    tv: VerifyCost
    t_d: float
    t_s: float
    t_c: float
    alpha_d: float
    pending: int


class DuoProposer(ProposerBase):
    """Lookup over the pair's suffix index and the draft model, one of them (or both) each step."""

    name: str = ProposerName.AUTO
    couples = True  # the draft model's tokens sample with the coupled rule's noise; lookup's are deterministic
    mixes = True  # the loop hands it the draft limit; it reads the controller's K for the draft model itself
    retest_tokens = 1  # a pause on acceptance is re-tested at each generation's start (loop.py), by one probe
    # (each drafts with the draft model)

    def __init__(self, draft: DraftModelProposer, index: SuffixIndex, acceptance: LookupAcceptance,
                 memory: LookupMemory = LookupMemory.CONVERSATION):
        """The draft model's reading costs are its own (``draft.costs``: the Pair keeps them per model).
        ``memory``: whether lookup may copy from the earlier requests the index holds or from this one alone."""
        self.draft, self.index, self.acceptance = draft, index, acceptance
        self.live_only = memory == LookupMemory.CONVERSATION
        self._tail_earlier = False  # the last handoff's tokens came from an earlier request
        self.length: Optional[DraftLength] = None
        # the last step's lookup proposals: a lookup prefix and a handoff's tail (judged only if what came before
        # them was kept)
        self._last: list[Proposal] = []
        self.rewrites = Rewrites()  # what this reply replaced where it broke off a copy (rewrite.py)
        self.last_choice = Choice()
        self._run = 0  # steps in a row the draft model drafted, so far
        self._regret = 0.0  # seconds the plain steps since it last drafted lost against it (mix.choose)
        self.risk = LookupRisk(time.perf_counter())

    def bind(self, length: DraftLength) -> None:
        """The draft-length controller of this generation (the loop re-tests a pause on the draft model's
        acceptance at its start, ``retest_tokens``: that acceptance was measured on another text), bound before
        its prefill: what lookup may lose is counted from here (``LookupRisk``)."""
        self.length = length
        self.risk = LookupRisk(time.perf_counter())

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        self.draft.begin(prompt, warm)
        self.index.start(prompt)
        self._last = []
        self._run, self._regret = 0, 0.0
        self.rewrites.reset()

    @property
    def costs(self) -> ReadCosts:
        """What the draft model was timed reading (and its runs between lookup stretches)."""
        return self.draft.costs

    def time_tokens(self, history: Sequence[int], k: int) -> float:
        return self.draft.time_tokens(history, k)

    def catch_up(self, history: Sequence[int], t_d: float) -> tuple[int, float]:
        return self.draft.catch_up(history, t_d)

    def propose(self, history: Sequence[int], k: int, sampler: SamplerSettings, rng: np.random.Generator,
                sample: bool, noise: Optional[GumbelNoise] = None) -> Draft:
        """Up to ``k`` tokens: lookup's, the draft model's (at most the controller's K), or lookup's then the
        draft model's."""
        t0 = time.perf_counter()
        self._learn(history)
        self.index.sync(history)
        ln = self.length
        k_d = min(ln.k, k) if ln is not None else 0
        led = ln is None or ln.probing or (ln.auto and not ln.measured())  # the controller measures
        prices = None  # (a fixed K: nothing to weigh)
        if led:
            choice = Choice(draft=k_d)  # do as it says
            match, src = None, ()
        else:
            match, ends = self._through_end(self.index.longest(k, live_only=self.live_only))
            if match is not None:
                self.rewrites.realign(self.index.span, history, match.start, match.length)
            match, src = self._rewritten(match, k)
            if match is None and k_d == 0:
                choice = Choice()  # nothing to weigh against a plain step: skip reading the prices (each step)
            else:
                prices = self._prices(ln, history) if ln.auto else None
                choice = self._choose(match, k, k_d, prices, ends)
        self.last_choice = choice
        if choice.draft > 0:
            self._run += 1
            self._regret = 0.0
        elif self._run:
            self.costs.runs.append(self._run)
            self._run = 0
        self._regret += choice.regret
        lookup = list(match.tokens[:choice.lookup]) if match is not None and choice.lookup else []
        out = Draft(tokens=list(lookup), q=[None] * len(lookup) if sample else None, probs=[None] * len(lookup),
                    lookup=len(lookup), earlier_head=bool(lookup) and match.earlier)
        if lookup:
            self._last.append(Proposal(len(history), tuple(lookup), 0, match.length, src[:len(lookup)],
                                       alone=choice.draft == 0))
        if choice.draft > 0:
            handoff = self._handoff(prices, len(history), lookup, choice.draft, k) if prices is not None else None
            d = self.draft.propose(list(history) + lookup, choice.draft, sampler, rng, sample, noise=noise,
                                   handoff=handoff, reach=k - len(lookup))
            out.tokens += d.tokens
            out.probs += d.probs
            if sample:
                out.q += d.q or []
            out.synced, out.t_sync, out.tail = d.synced, d.t_sync, d.tail
            out.earlier_tail = d.tail > 0 and self._tail_earlier
        out.seconds = time.perf_counter() - t0
        return out

    def finish(self, history: Sequence[int], end: Optional[int] = None) -> None:
        """The generation ended at ``history``: index all of it (the next request may quote it). ``end``: the
        end-of-generation token the target chose there (a proposal that ended so was right), if it did."""
        self._learn(history, end)
        self.index.sync(history)

    def _prices(self, ln: DraftLength, history: Sequence[int]) -> Prices:
        t_d = ln.t_d or 0.0
        return Prices(ln.verify(), t_d, *self.costs.reading(t_d), alpha_d=min(ln.alpha, 0.999),
                      pending=self.draft.unread(history))

    def _through_end(self, match: Optional[Match]) -> tuple[Optional[Match], bool]:
        """``match`` cut after its first end-of-generation token (nothing after it can be emitted), and whether
        it was: then no draft token may follow it."""
        if match is None:
            return match, False
        end = end_of_reply(match.tokens, self.draft.model.is_eog)  # (None from an MTP head: the loop cuts there)
        return (match, False) if end is None else (replace(match, tokens=match.tokens[:end]), True)

    def _choose(self, match, k: int, k_d: int, prices: Optional[Prices], ends: bool = False) -> Choice:
        n_avail = len(match.tokens) if match is not None else 0
        if prices is None:  # a fixed K: no costs measured to weigh; a long match is taken, else the draft model
            return Choice(lookup=n_avail) if n_avail and match.length >= FIXED_MIN_MATCH else Choice(draft=k_d)
        p = prices
        if n_avail:  # no longer than what this generation's lookup may still lose (LookupRisk)
            n_avail = self.risk.longest(p.tv, time.perf_counter(), n_avail)
        return choose(p.tv, alpha_l=self.acceptance.optimistic(match.length) if match is not None else 0.0,
                      n_avail=n_avail, k_d=k_d, alpha_d=p.alpha_d, t_d=p.t_d, t_c=p.t_c,
                      can_extend=n_avail < k and not ends,
                      k_max=k, t_s=p.t_s, pending=p.pending, runs=self._runs(),
                      regret=self._regret)

    def _handoff(self, p: Prices, start: int, lookup: list, k_d: int, k: int):
        """The draft model's question after each token it drafts (draftmodel.py): does lookup now offer tokens
        worth more than drafting on (mix.hand_over)? Those that follow the history (``start`` tokens),
        ``lookup`` and the drafted tokens in the index."""
        sunk = reading(p.pending + len(lookup), p.t_s, p.t_c)

        def ask(drafted: Sequence[int]) -> tuple:
            j = len(drafted)
            match = self._through_end(self.index.longest(k - len(lookup) - j, after=lookup + list(drafted),
                                                         live_only=self.live_only))[0]
            if match is None:
                return ()
            match, src = self._rewritten(match, k - len(lookup) - j)
            take = hand_over(p.tv, alpha_d=p.alpha_d, alpha_l=self.acceptance.optimistic(match.length), j=j,
                             k_d=k_d, n_avail=len(match.tokens), t_d=p.t_d, sunk=sunk + j * p.t_d, t_s=p.t_s,
                             t_c=p.t_c)
            if take:
                self._tail_earlier = match.earlier
                self._last.append(Proposal(start, tuple(lookup) + tuple(drafted) + match.tokens[:take],
                                           len(lookup) + j, match.length, src[:take]))
            return match.tokens[:take]
        return ask

    def _rewritten(self, match: Optional[Match], n: int) -> tuple[Optional[Match], tuple]:
        """``match`` with what this reply replaced rewritten in its continuation, and each token's source
        position (None for a rewritten one)."""
        if match is None:
            return None, ()
        tokens, src = self.rewrites.apply(match.tokens, match.start, n)
        return replace(match, tokens=tokens), src

    def _runs(self) -> float:
        """Draft steps a return to the draft model is expected to last (the mean of recent runs)."""
        runs = list(self.costs.runs)
        return (sum(runs) + RUNS_PRIOR) / (len(runs) + 1)

    def _learn(self, history: Sequence[int], end: Optional[int] = None) -> None:
        """How the last step's lookup proposals fared: the history now holds what the target kept of them (and
        ``end``, the end-of-generation token after it, when the generation ended so)."""
        last, self._last = self._last, []
        for p in last:
            if len(history) <= p.start:
                continue  # a new generation: nothing was verified
            seen = list(history[p.start:]) + ([end] if end is not None else [])
            kept = 0
            for tok, was in zip(p.tokens, seen):
                if tok != was:
                    break
                kept += 1
            if kept < p.begin:
                continue  # a draft-model token before lookup's was rejected: lookup's were never judged
            if kept == len(seen) < len(p.tokens):
                continue  # the generation stopped inside the proposal (its token limit): the rest was not judged
            broke = kept - p.begin  # the first lookup token the target did not keep
            if kept < len(p.tokens) and broke < len(p.src) and p.src[broke] is not None:
                self.rewrites.broke(p.src[broke], p.start + kept)  # the reply left the source here
            self.acceptance.record(p.match_len, len(p.tokens) - p.begin, broke)
            if p.alone and self.length is not None and self.length.auto and self.length.measured():
                self.risk.judged(self.length.verify(), len(p.tokens), kept)

    def memory(self) -> int:
        """Bytes held by the lookup index."""
        return self.index.nbytes()

    def close(self) -> None:
        """The index and the draft model belong to the Pair."""
