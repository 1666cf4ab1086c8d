"""The decode loop's invariants on a numpy fake target (tests/support/fake_target.py): no model files, milliseconds.

Rollback keeps the KV cache at ``tokens[:-1]``, a stop switch ends within one step, the context and EOG stop
reasons, the provenance of each token for a scripted draft, and greedy speculative == plain."""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np
import pytest

from app.engine.events import (ACCEPTED, BONUS, CORRECTED, LOOKUP, MODEL, PLAIN, DoneEvent, StepEvent,
                               TokenEvent)
from app.engine.loop import GenConfig, generate
from app.engine.drafters.lookup import PromptLookupProposer
from app.engine.drafters.protocol import Draft, ProposerBase
from app.engine.decoding.tree import Sibling
from app.engine.decoding.grammar import GrammarSpec
from app.engine.decoding.sampling import SamplerSettings

from support.fake_target import FakeTarget
from support.greedy import RecordingTarget, argmax_misses
from engine.control.test_draftlen import Sim, auto

GREEDY = SamplerSettings(temperature=0.0)
PROMPT = [1, 2, 3]


class ScriptedProposer(ProposerBase):
    """Drafts the fake's own continuation (``h + 1, h + 2, ...``), except at the draft positions ``wrong[step]``
    lists, where it proposes a token the target will not choose."""

    name = "scripted"

    def __init__(self, vocab: int, wrong: dict[int, int] | None = None, empty_steps: Sequence[int] = ()):
        self.vocab, self.wrong, self.empty_steps = vocab, wrong or {}, set(empty_steps)
        self.step = 0

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        self.step = 0

    def propose(self, history, k, sampler, rng, sample) -> Draft:
        step, self.step = self.step, self.step + 1
        if step in self.empty_steps:
            return Draft()
        tokens = [(history[-1] + i + 1) % self.vocab for i in range(k)]
        if step in self.wrong and self.wrong[step] < k:
            tokens[self.wrong[step]] = (tokens[self.wrong[step]] + 7) % self.vocab
        return Draft(tokens=tokens, probs=[0.5] * len(tokens), synced=1)

    def close(self) -> None:
        pass


def events(target, cfg, proposer=None, stop=None, prompt=PROMPT):
    return list(generate(target, prompt, cfg, proposer, stop=stop))


def done_of(evs) -> DoneEvent:
    assert isinstance(evs[-1], DoneEvent)
    return evs[-1]


def test_rollback_keeps_the_cache_at_all_tokens_but_the_pending_one():
    target = FakeTarget(n_ctx=256)
    proposer = ScriptedProposer(target.n_vocab, wrong={0: 1, 2: 0, 3: 2, 5: 1})
    tokens, checked = list(PROMPT), 0
    for ev in generate(target, PROMPT, GenConfig(max_tokens=40, sampler=GREEDY, k=4), proposer):
        if isinstance(ev, TokenEvent) and ev.token >= 0:
            tokens.append(ev.token)
        elif isinstance(ev, StepEvent) and len(tokens) - len(PROMPT) < 40:  # (the last step may stop early)
            assert target.cached == tokens[:-1], f"step {ev.step}"
            checked += 1
    assert checked > 5


def test_a_stop_switch_ends_generation_within_one_step():
    stop = threading.Event()
    steps = 0
    last = None
    for ev in generate(FakeTarget(), PROMPT, GenConfig(max_tokens=50, sampler=GREEDY, k=3),
                       ScriptedProposer(64), stop=stop):
        if isinstance(ev, StepEvent):
            steps += 1
            stop.set()
        last = ev
    assert steps == 1
    assert isinstance(last, DoneEvent) and last.reason == "stopped"


@pytest.mark.parametrize("speculative", [False, True])
def test_a_full_context_ends_with_the_context_reason(speculative):
    target = FakeTarget(n_ctx=16)
    done = done_of(events(target, GenConfig(max_tokens=100, sampler=GREEDY, k=4, speculative=speculative),
                          ScriptedProposer(64)))
    assert done.reason == "context"
    assert len(PROMPT) + len(done.tokens) == target.n_ctx
    assert len(target.cached) <= target.n_ctx


@pytest.mark.parametrize("speculative", [False, True])
def test_an_end_of_generation_token_ends_with_the_eog_reason(speculative):
    target = FakeTarget(eog=10)
    done = done_of(events(target, GenConfig(max_tokens=100, sampler=GREEDY, k=4, speculative=speculative),
                          ScriptedProposer(64)))
    assert done.reason == "eog"
    assert list(done.tokens) == list(range(4, 10))  # up to, not including, the EOG token


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("sampler", [GREEDY, SamplerSettings(temperature=0.8, seed=2)])
def test_ignore_eos_and_min_tokens_hold_the_end_off(speculative, sampler):
    # the fake's EOG token 10 follows 9: ignore_eos never chooses it (the reply runs to max_tokens), min_tokens
    # only before its count; a grammar decides the end itself, so neither joins one
    cfg = dict(max_tokens=12, sampler=sampler, k=4, speculative=speculative)
    done = done_of(events(FakeTarget(eog=10), GenConfig(**cfg, ignore_eos=True), ScriptedProposer(64)))
    assert done.reason == "max_tokens" and len(done.tokens) == 12 and 10 not in done.tokens
    done = done_of(events(FakeTarget(eog=10), GenConfig(**cfg, min_tokens=8), ScriptedProposer(64)))
    assert len(done.tokens) >= 8 and 10 not in done.tokens
    plain = done_of(events(FakeTarget(eog=10), GenConfig(**cfg, min_tokens=3), ScriptedProposer(64)))
    if sampler is GREEDY:
        assert plain.reason == "eog" and list(plain.tokens) == list(range(4, 10))  # already met: no change
    with pytest.raises(ValueError, match="min_tokens"):
        GenConfig(max_tokens=4, min_tokens=5).validate()
    with pytest.raises(ValueError, match="ignore_eos"):
        GenConfig(ignore_eos=True, grammar=GrammarSpec.json_object()).validate()


def test_a_draft_is_cut_after_its_end_of_generation_token():
    # the scripted draft runs 4..11 across the EOG token 10: the verify pass sees 4..10 only (7 tokens), since
    # nothing after an end of generation can be emitted
    target = FakeTarget(eog=10)
    evs = events(target, GenConfig(max_tokens=100, sampler=GREEDY, k=8), ScriptedProposer(64))
    steps = [e for e in evs if isinstance(e, StepEvent)]
    assert [(s.drafted, s.accepted) for s in steps] == [(7, 7)]
    assert done_of(evs).reason == "eog" and list(done_of(evs).tokens) == list(range(4, 10))


def test_provenance_kinds_follow_the_scripted_draft():
    # step 0: all 3 accepted + bonus; step 1: 1 accepted, then corrected; step 2: no draft -> plain
    target = FakeTarget()
    proposer = ScriptedProposer(target.n_vocab, wrong={1: 1}, empty_steps=[2])
    evs = events(target, GenConfig(max_tokens=7, sampler=GREEDY, k=3), proposer)
    toks = [e for e in evs if isinstance(e, TokenEvent)]
    assert [(e.token, e.kind, e.step) for e in toks] == [
        (4, ACCEPTED, 0), (5, ACCEPTED, 0), (6, ACCEPTED, 0), (7, BONUS, 0),
        (8, ACCEPTED, 1), (9, CORRECTED, 1),
        (10, PLAIN, 2),
    ]
    corrected = toks[5]
    assert corrected.draft_token == (9 + 7) % 64 and corrected.draft_pos == 1
    assert [e.kind for e in events(FakeTarget(), GenConfig(max_tokens=3, sampler=GREEDY, speculative=False))
            if isinstance(e, TokenEvent)] == [PLAIN] * 3
    assert done_of(evs).reason == "max_tokens"


class HandoffProposer(ScriptedProposer):
    """Two "model" tokens, then ``tail`` tokens handed to lookup (the last ``tail`` of each draft: duo.py's
    handoff), the lookup token at ``wrong`` (an index into the draft) not the target's."""

    def __init__(self, vocab: int, tail: int, wrong: int | None = None):
        super().__init__(vocab)
        self.tail, self.bad = tail, wrong

    def propose(self, history, k, sampler, rng, sample) -> Draft:
        draft = super().propose(history, k, sampler, rng, sample)
        if self.bad is not None and self.bad < len(draft.tokens):
            draft.tokens[self.bad] = (draft.tokens[self.bad] + 7) % self.vocab
            self.bad = None  # (the first step only)
        draft.probs[-self.tail:] = [None] * self.tail
        draft.tail = self.tail
        return draft


def test_a_handoff_tail_is_told_apart_from_the_models_tokens():
    """Tokens lookup proposed after the model's (a handoff) say so, and the step and the stats count them."""
    target = FakeTarget()
    evs = events(target, GenConfig(max_tokens=14, sampler=GREEDY, k=5), HandoffProposer(target.n_vocab, 3, 3))
    toks = [e for e in evs if isinstance(e, TokenEvent)]
    steps = [e for e in evs if isinstance(e, StepEvent)]
    # step 0: 2 model tokens, lookup's 2nd of 3 wrong -> 2 + 1 kept, a correction; step 1 on: all 5 + a bonus
    assert [(e.kind, e.drafter) for e in toks[:4]] == [(ACCEPTED, MODEL), (ACCEPTED, MODEL), (ACCEPTED, LOOKUP),
                                                      (CORRECTED, LOOKUP)]
    assert [e.drafter for e in toks[4:10]] == [MODEL, MODEL, LOOKUP, LOOKUP, LOOKUP, None]
    assert [(s.lookup, s.lookup_accepted) for s in steps[:2]] == [(3, 1), (3, 3)]
    done = done_of(evs)
    assert done.stats.lookup_drafted == sum(s.lookup for s in steps)
    assert done.stats.lookup_accepted == sum(e.kind == ACCEPTED and e.drafter == LOOKUP for e in toks)
    assert list(done.tokens) == list(range(4, 18))  # the fake's own continuation: output unchanged


def test_greedy_speculative_equals_plain_on_the_fake():
    plain = done_of(events(FakeTarget(), GenConfig(max_tokens=30, sampler=GREEDY, speculative=False)))
    for k in (1, 2, 5):
        rng = np.random.default_rng(k)
        wrong = {s: int(rng.integers(0, k)) for s in range(30) if rng.random() < 0.5}
        target = RecordingTarget(FakeTarget())
        evs = events(target, GenConfig(max_tokens=30, sampler=GREEDY, k=k), ScriptedProposer(64, wrong=wrong))
        assert argmax_misses(target.passes, evs) == []  # every token is its verify row's choice
        spec = done_of(evs)
        assert spec.tokens == plain.tokens and spec.text == plain.text
        assert spec.reason == plain.reason == "max_tokens"


class ResumingLength:
    """A draft-length policy that starts paused and resumes drafting (K = 4) after its first step."""

    paused, probing, free_probe, k, wake, warm, auto, t_d = True, False, False, 0, 0, False, False, None
    WHY = "drafting was measured to lose"

    def begin(self, retest: bool = True) -> None:
        pass

    def worth_reading(self, seconds: float, tokens: int) -> bool:
        return True

    def update(self, drafted, accepted, t_draft, t_verify, synced, t_sync=0.0, free=0, tail=0, extra=0) -> None:
        self.paused, self.k = False, 4

    def limit(self):
        return self.WHY if self.paused else None


def test_a_paused_step_says_why_even_when_drafting_resumes_after_it():
    target = FakeTarget()
    cfg = GenConfig(max_tokens=12, sampler=GREEDY, k="auto")
    evs = list(generate(target, PROMPT, cfg, ScriptedProposer(64), length=ResumingLength()))
    steps = [e for e in evs if isinstance(e, StepEvent)]
    assert steps[0].paused and steps[0].limit == ResumingLength.WHY
    assert not any(s.paused for s in steps[1:]) and steps[1].drafted == 4
    done = done_of(evs)
    assert done.stats.paused_steps == 1 and done.stats.limit == ResumingLength.WHY


def test_a_confirmed_pause_on_lookups_acceptance_is_retested_by_the_next_generation():
    """Prompt lookup's acceptance belongs to the text (an edit request copies, a question does not) and its probe
    costs nothing to propose: a pause on it, however confirmed, is re-tested from the next generation's first step
    (on the demo pair, lookup alone stayed paused on 99 % of edit-class's passes after edit-js had paused it)."""
    length = Sim(0.25, t_draft=0.4, a=1.0, b=0.1).run(auto(), 300)  # paused on acceptance, confirmed by probes
    assert length.paused and length.culprit() == "acceptance"
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]  # a repeat: lookup has a proposal at the first step
    steps = [ev for ev in generate(FakeTarget(), prompt, GenConfig(max_tokens=4, sampler=GREEDY, k="auto"),
                                   PromptLookupProposer(), length=length) if isinstance(ev, StepEvent)]
    assert steps[0].probe and steps[0].drafted > 0 and not length.paused  # the repeat was kept: it drafts again


class ReadingProposer(ScriptedProposer):
    """A scripted draft that must read what it has not seen, at ``per_token`` seconds a token, and whose pause on
    acceptance is re-tested at each generation's start (as the combined drafter's)."""

    retest_tokens = 1

    def __init__(self, vocab: int, per_token: float):
        super().__init__(vocab)
        self.per_token, self.warmed = per_token, None

    def begin(self, prompt: Sequence[int], warm: bool = True) -> None:
        super().begin(prompt, warm)
        self.warmed = warm

    def catch_up(self, history, t_d: float) -> tuple[int, float]:
        return len(history), len(history) * self.per_token


def test_a_paused_draft_neither_reads_nor_retests_a_long_prompt_that_the_reply_cannot_pay_back():
    """A code completion: a long prompt, a short reply, a draft paused on acceptance. Re-testing the pause would
    make the draft read the whole prompt first; where that costs more than drafting could save in the reply,
    the draft is not warmed and not re-tested (it was: 2.5–4 s a request on one CPU thread, for 4 drafted tokens)."""
    target = FakeTarget(n_ctx=512)
    prompt = [1 + i % 60 for i in range(200)]
    cfg = GenConfig(max_tokens=8, sampler=GREEDY, k="auto")
    for per_token, reads in ((10.0, False), (1e-9, True)):  # (seconds: the Sim's timings are in seconds too)
        length = Sim(0.25, t_draft=0.4, a=1.0, b=0.1).run(auto(), 300)  # paused on acceptance, confirmed
        proposer = ReadingProposer(target.n_vocab, per_token)
        steps = [e for e in generate(target, prompt, cfg, proposer, length=length) if isinstance(e, StepEvent)]
        assert proposer.warmed is reads and steps[0].probe is reads, per_token
        if not reads:  # (a load change may bring a free probe: prompt lookup, which reads nothing)
            assert all(s.drafted == s.lookup and (s.paused or s.probe) for s in steps)


class BranchingProposer(ScriptedProposer):
    """Drafts the fake's continuation wrong at position ``wrong`` and offers the right token there as a branch."""

    def __init__(self, vocab: int, wrong: int):
        super().__init__(vocab, {s: wrong for s in range(1000)})
        self.at = wrong

    def propose(self, history, k, sampler, rng, sample) -> Draft:
        draft = super().propose(history, k, sampler, rng, sample)
        if self.at < len(draft.tokens):
            draft.siblings = [Sibling(self.at, (history[-1] + self.at + 1) % self.vocab, None, 0.25)]
        return draft


def test_a_branch_the_target_takes_is_kept_and_the_cache_holds_its_path():
    target = FakeTarget(n_ctx=256)
    evs = events(target, GenConfig(max_tokens=20, sampler=GREEDY, k=4), BranchingProposer(64, wrong=2))
    steps = [e for e in evs if isinstance(e, StepEvent)]
    assert all(s.tree == 1 and s.branch_hit and s.accepted == 3 and s.emitted == 4 for s in steps)
    done = done_of(evs)
    assert list(done.tokens) == [(3 + i + 1) % 64 for i in range(20)]  # the fake's own continuation
    assert target.cached == PROMPT + list(done.tokens)[:-1] and target.tree.trees == len(steps)
    kinds = [e.kind for e in evs if isinstance(e, TokenEvent) and e.step == 0]
    assert kinds == ["accepted"] * 3 + ["bonus"]  # two chain tokens, the branch, the token after it
    assert [n.kept for n in steps[0].branches] == [True, True, False, False, True]
    assert done.stats.branch_hits == len(steps) and done.stats.tree_tokens == len(steps)


def test_a_branch_the_target_turns_down_leaves_the_chains_correction():
    target = FakeTarget(n_ctx=256)

    class WrongBranch(BranchingProposer):
        def propose(self, history, k, sampler, rng, sample) -> Draft:
            draft = super().propose(history, k, sampler, rng, sample)
            draft.siblings = [Sibling(s.pos, (s.token + 3) % self.vocab) for s in draft.siblings]
            return draft

    evs = events(target, GenConfig(max_tokens=9, sampler=GREEDY, k=4), WrongBranch(64, wrong=2))
    step = next(e for e in evs if isinstance(e, StepEvent))
    assert (step.accepted, step.emitted, step.branch_hit, step.drafted) == (2, 3, False, 5)
    first = [e for e in evs if isinstance(e, TokenEvent) and e.step == 0]
    assert first[-1].kind == "corrected" and first[-1].draft_token == (3 + 3 + 7) % 64
    assert target.cached == PROMPT + list(done_of(evs).tokens)[:-1]


def test_near_the_contexts_end_the_branches_are_left_out_not_an_error():
    """Each node of a tree takes a cell: where the chain fits and its branches would not, the chain alone goes."""
    class TwoBranches(BranchingProposer):
        def propose(self, history, k, sampler, rng, sample) -> Draft:
            draft = super().propose(history, k, sampler, rng, sample)
            draft.siblings = [Sibling(0, (history[-1] + 9) % self.vocab)] + draft.siblings
            return draft

    target = FakeTarget(n_ctx=16)
    evs = events(target, GenConfig(max_tokens=50, sampler=GREEDY, k=4), TwoBranches(64, wrong=2))
    done = done_of(evs)
    assert done.reason == "context" and list(done.tokens) == [(3 + i + 1) % 64 for i in range(len(done.tokens))]
    steps = [e for e in evs if isinstance(e, StepEvent)]
    assert steps[0].tree == 2 and any(s.drafted and not s.tree for s in steps)  # the last ones verified chains
