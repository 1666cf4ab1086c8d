"""Two drafters at once (proposer "auto": prompt lookup and the draft model, chosen per step).

Exactness of mixed drafts on synthetic distributions (chi-squared, fixed seeds: lookup tokens are
deterministic, q = one-hot, the draft model's tokens are sampled from q after them); the choice's arithmetic;
the controller learning only from the draft model's tokens; and through the real loop on the demo pair: the
greedy output equals plain decoding, tokens say which drafter proposed them, a seed holds."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.control.draftlen import FORGET_ALPHA, DraftLength
from app.engine.drafters.duo import DuoProposer, Proposal
from app.engine.drafters.readcost import CATCH_PRIOR, STEADY_PRIOR, ReadCosts
from app.engine.drafters.kvshare import in_use
from app.engine.events import ACCEPTED, LOOKUP, MODEL, DoneEvent, StepEvent, TokenEvent
from app.engine.loop import GenConfig
from app.engine.names import LookupMemory
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.control.mix import BUCKETS, FORGET_L, Choice, LookupAcceptance, choose, expected_mixed, hand_over, reading
from app.engine.decoding.sampling import SamplerSettings
from app.engine.stats import expected_tokens
from app.engine.drafters.suffix import SuffixIndex
from app.engine.decoding.verify import rejection_sample, sample_from
from app.engine.control.verifycost import VerifyCost
from app.lab.prompts import builtin_suite

from support.fake_target import FakeTarget
from support.greedy import assert_same_greedy, checked_run

DRAWS = 20_000
CHI2_CRIT = {2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515}  # significance 0.001

P = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
Q = np.array([0.3, 0.3, 0.2, 0.1, 0.1])


def chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    mask = probs > 0
    expected = probs[mask] * counts.sum()
    assert counts[~mask].sum() == 0, "a token with zero target probability was emitted"
    return float(((counts[mask] - expected) ** 2 / expected).sum()), int(mask.sum() - 1)


# lookup tokens first (deterministic), then draft-model tokens sampled from q; the targets p_i per position
MIXES = {
    "lookup_then_draft": ([2], 2),
    "two_lookup_then_draft": ([3, 1], 1),
    "lookup_the_target_never_picks": ([0], 2),  # p(0) = 0 at the first position
    "lookup_only": ([2, 2, 4], 0),
}


def assert_each_position_follows(p_rows: np.ndarray, draw, seed: int, label: str) -> None:
    """``draw(rng)`` gives a (draft, q rows) pair; DRAWS of them go through rejection sampling, and the tokens
    emitted at each position must follow that position's target p_i (chi-squared; the targets are
    position-wise independent here, so each position's marginal over the runs reaching it is p_i)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((len(p_rows), 5), dtype=np.int64)
    for _ in range(DRAWS):
        draft, q = draw(rng)
        n, nxt = rejection_sample(p_rows, q, draft, rng)
        for i, tok in enumerate(draft[:n] + [nxt]):
            counts[i, tok] += 1
    for i in range(len(p_rows)):
        if counts[i].sum() < 500:
            continue
        stat, df = chi2(counts[i], p_rows[i])
        assert stat < CHI2_CRIT[df], f"{label}, position {i}: chi2={stat:.1f} (df={df}) counts={counts[i]}"


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_mixed_drafts_keep_the_targets_distribution(mix):
    lookup, n_draft = MIXES[mix]
    gamma = len(lookup) + n_draft
    p0 = np.array([0.0, 0.3, 0.3, 0.25, 0.15]) if mix == "lookup_the_target_never_picks" else P
    p_rows = np.stack([np.roll(p0, i) if i else p0 for i in range(gamma + 1)])
    q_rows = [None] * len(lookup) + [np.roll(Q, j + 1) for j in range(n_draft)]  # None: q = one-hot (lookup)

    def draw(rng):
        return list(lookup) + [sample_from(q_rows[i], rng) for i in range(len(lookup), gamma)], q_rows
    assert_each_position_follows(p_rows, draw, 2024, mix)


def test_a_handoff_to_lookup_keeps_the_targets_distribution():
    """The draft model samples, and lookup takes over where its continuation depends on what was sampled (duo's
    handoff: the index is asked with the drafted tokens): the proposal at each position is still a function of
    what came before it, lookup's one-hot, so rejection sampling keeps p position by position."""
    p_rows = np.stack([np.roll(P, i) for i in range(4)])
    q_rows = [np.roll(Q, j + 1) for j in range(3)]

    def draw(rng):
        x0 = sample_from(q_rows[0], rng)
        if x0 in (1, 2):  # lookup "matches" after these: hands over with a continuation that depends on x0
            return [x0, (x0 + 2) % 5, 0], [q_rows[0], None, None]
        return [x0, sample_from(q_rows[1], rng)], q_rows[:2]
    assert_each_position_follows(p_rows, draw, 7, "handoff")


def test_the_draft_model_hands_over_to_a_trusted_match_and_drafts_on_past_a_doubtful_one():
    a, b = 0.020, 0.0045  # the demo pair's verify line on this CPU (seconds)
    tv = VerifyCost(a, b)
    # the draft model takes the target's cache (kvshare.py): what lookup emits costs it nothing to read but t_s
    common = dict(alpha_d=0.95, j=3, k_d=8, t_d=0.011, sunk=0.011 * 3, t_s=0.017, t_c=0.0)
    assert hand_over(tv, alpha_l=0.95, n_avail=10, **common) == 10  # a copy resumes: free tokens
    assert hand_over(tv, alpha_l=0.2, n_avail=10, **common) == 0  # a guess: the draft model is likelier
    short = hand_over(tv, alpha_l=0.9, n_avail=10, **common)
    assert 0 < short < 10  # a fair match: a few of its tokens, verifying more would cost more than they bring
    # a free draft model (t_d = 0) and no reading: nothing to save by handing over a match no better than it
    free = dict(common, t_d=0.0, sunk=0.0, t_s=0.0, t_c=0.0)
    assert hand_over(tv, alpha_l=0.9, n_avail=10, **free) == 0


def test_a_draft_model_that_takes_the_targets_cache_is_priced_so_before_any_catch_up_was_timed():
    """Its catch-up is a copy and one token read however long the stretch (kvshare.py): before one was timed the
    priors say so, so the first reply returns to it after a lookup stretch at once (with the reading priors it
    took about 55 plain steps there, the regret's way back: edit-hints' first run)."""
    t_d, a, b = 0.0085, 0.018, 0.0025
    tv = VerifyCost(a, b)
    own, shared = ReadCosts(), ReadCosts(shared=True)
    assert own.reading(t_d) == pytest.approx((STEADY_PRIOR * t_d, CATCH_PRIOR * t_d))
    assert shared.reading(t_d) == pytest.approx((t_d, 0.0))
    common = dict(alpha_l=0.0, n_avail=0, k_d=8, alpha_d=0.99, t_d=t_d, can_extend=False, k_max=16, pending=40)
    assert choose(tv, **common, t_s=own.reading(t_d)[0], t_c=own.reading(t_d)[1]).draft == 0
    assert choose(tv, **common, t_s=shared.reading(t_d)[0], t_c=shared.reading(t_d)[1]).draft == 8
    shared.catch.append(0.004)  # what was timed wins over the prior
    assert shared.reading(t_d)[1] == 0.004


def test_reading_costs_are_kept_apart_for_a_shared_cache_and_the_draft_models_own(smol_pair):
    """A copy llama.cpp refused leaves the draft model reading for itself: it must not be priced as a copy."""
    proposer = smol_pair.proposer(GenConfig(proposer="auto"))
    assert in_use(smol_pair.kv_share) and proposer.draft.share is smol_pair.kv_share
    read_costs = smol_pair.read_costs.of  # the pair keeps them
    assert proposer.costs is read_costs(smol_pair.draft, True) is not read_costs(smol_pair.draft, False)
    assert read_costs(smol_pair.draft, True).shared and not read_costs(smol_pair.draft, False).shared


def test_a_lookup_proposal_ends_at_an_end_of_generation_and_counts_as_right_when_the_reply_ended_there():
    acc = LookupAcceptance()
    duo = DuoProposer(DraftModelProposer(FakeTarget(vocab=128, eog=99)), SuffixIndex(), acc)  # 99 ends a reply
    prompt = [5, 1, 2, 3, 4, 99, 7, 8, 1, 2, 3]  # the tail 1 2 3 was followed by 4, the end, 7 8 …
    duo.index.start(prompt)
    match, ends = duo._through_end(duo.index.longest(8))
    assert match.tokens == (4, 99) and ends  # nothing after the end is proposed, no draft token may follow
    b = acc.bucket(match.length)
    before = acc.accepted[b], acc.trials[b]
    duo._last = [Proposal(len(prompt), match.tokens, 0, match.length)]
    duo.finish(prompt + [4])  # a token limit stopped the reply after 4: the end was not judged
    assert (acc.accepted[b], acc.trials[b]) == before
    duo._last = [Proposal(len(prompt), match.tokens, 0, match.length)]
    duo.finish(prompt + [4], end=99)  # the target ended the reply there: both tokens were right
    assert acc.accepted[b] == pytest.approx(before[0] * FORGET_L + 2) and acc.trials[b] == pytest.approx(
        before[1] * FORGET_L + 2)


def test_the_controller_learns_only_from_the_draft_models_tokens():
    ln = DraftLength("auto", 16)
    ln.update(0, 0, 0.0, 0.020)  # a plain pass
    ln.update(4, 4, 0.040, 0.030)  # the measuring draft: 4 of 4
    before = ln.alpha, ln.t_d
    ln.update(10, 3, 0.0001, 0.060, free=10)  # a lookup step: 3 of 10 lookup tokens
    assert (ln.alpha, ln.t_d) == before  # neither the draft's acceptance nor its cost moved …
    assert ln.costs._w > 2.5  # … but the verify fit saw the pass
    ln.update(6, 2, 0.020, 0.050, free=4)  # 4 lookup tokens then 2 draft tokens, a lookup token rejected
    assert ln.alpha == before[0]
    ln.update(6, 5, 0.020, 0.050, free=4)  # lookup all kept, then one of two draft tokens
    assert ln.alpha < before[0]
    after = ln.alpha, ln.trials
    ln.update(7, 2, 0.030, 0.050, tail=4)  # 3 draft tokens, then lookup's 4 (a handoff): a draft token rejected
    assert ln.alpha < after[0] and ln.trials == pytest.approx(after[1] * FORGET_ALPHA + 3)  # 3 judged
    after = ln.alpha, ln.trials
    ln.update(7, 4, 0.030, 0.050, tail=4)  # the 3 draft tokens kept, lookup's first of 4 too, then not
    assert ln.alpha > after[0]  # the draft model's 3 of 3: lookup's rejection is not the draft's


# --- the real loop on the demo pair ------------------------------------------------------------------------

def _run(pair, prompt, **kw):
    pair.reset()
    cfg = GenConfig(**kw)
    return checked_run(pair.target, prompt, cfg, pair.proposer(cfg), length=pair.draft_length(cfg))


@pytest.mark.parametrize("k", ["auto", 4])
def test_greedy_auto_equals_plain_on_edit_and_other_prompts(smol_pair, k):
    prompts = builtin_suite("edit") + builtin_suite("code,chat")[:2]
    lookup = 0
    for prompt in prompts:
        tokens = prompt.tokens(smol_pair)
        plain, _ = _run(smol_pair, tokens, max_tokens=96, speculative=False)
        spec, stats = _run(smol_pair, tokens, max_tokens=96, proposer="auto", k=k)
        assert_same_greedy(smol_pair, tokens, plain, spec, f"{prompt.id}: auto (K={k}) differs from plain")
        lookup += stats.lookup_drafted
        assert stats.drafted >= stats.lookup_drafted and stats.accepted >= stats.lookup_accepted
    if k != "auto":  # auto K may pause drafting on a busy machine (timings decide): identity must hold, lookup need not
        assert lookup > 0, "the edit prompts should have made auto propose from lookup"


def test_token_events_say_which_drafter_and_steps_count_lookup(smol_pair):
    prompt = next(p for p in builtin_suite("edit") if p.id == "edit-hints").tokens(smol_pair)
    smol_pair.reset()
    # a fixed K: the choice does not hang on timings (a long match is taken, else the draft model drafts)
    events = list(smol_pair.generate(prompt, GenConfig(max_tokens=128, proposer="auto", k=12)))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    steps = [e for e in events if isinstance(e, StepEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    drafters = {t.drafter for t in tokens if t.kind == ACCEPTED}
    assert drafters == {LOOKUP, MODEL}, drafters
    assert all(t.drafter is None for t in tokens if t.draft_pos is None)
    assert sum(s.lookup for s in steps) == done.stats.lookup_drafted > 0
    assert sum(t.kind == ACCEPTED and t.drafter == LOOKUP for t in tokens) == done.stats.lookup_accepted
    assert smol_pair.lookup_index.n_tokens >= len(prompt) + len(tokens) - 1
    assert 0 < smol_pair.lookup_index.nbytes() < 4 * 1024 * 1024


def test_a_second_request_finds_the_first_reply(smol_pair):
    first = next(p for p in builtin_suite("edit") if p.id == "edit-rename")
    smol_pair.reset()
    done = list(smol_pair.generate(first.tokens(smol_pair), GenConfig(max_tokens=64, proposer="auto")))[-1]
    reply = list(done.tokens)[:24]
    smol_pair.target.reset()  # a new request, the KV cache gone; lookup's memory stays (reset(lookup=False))
    smol_pair.lookup_index.start(smol_pair.target.tokenize("Explain this:\n", add_special=False) + reply[:8])
    match = smol_pair.lookup_index.longest(8)
    assert smol_pair.lookup_index.n_documents >= 2
    assert match is not None and match.length >= 8  # the first reply's text (or the code it copied) is found


def test_a_seed_holds_with_auto(smol_pair):
    prompt = builtin_suite("edit")[0].tokens(smol_pair)
    sampler = SamplerSettings(temperature=0.8, seed=11)
    off, _ = _run(smol_pair, prompt, max_tokens=48, sampler=sampler, speculative=False, rule="coupled")
    auto, stats = _run(smol_pair, prompt, max_tokens=48, sampler=sampler, proposer="auto", rule="coupled")
    assert auto == off
    spec, stats = _run(smol_pair, prompt, max_tokens=48, sampler=sampler, proposer="auto")  # rejection sampling
    assert len(spec) > 0 and stats.drafted > 0


@pytest.mark.parametrize("memory", list(LookupMemory))
def test_a_repeated_request_copies_the_earlier_reply_only_with_the_pairs_memory_and_says_so(smol_pair, memory):
    """The same question asked twice: with the pair's memory lookup copies the first reply and counts those
    tokens apart (``lookup_earlier``); with the conversation's alone it cannot see it. Greedy output is the
    target's either way."""
    prompt = next(p for p in builtin_suite("code") if p.id == "code-prime").tokens(smol_pair)
    cfg = GenConfig(max_tokens=64, proposer="auto", k=12, lookup_memory=memory)  # fixed K: no timings decide
    plain, _ = _run(smol_pair, prompt, max_tokens=64, speculative=False)
    smol_pair.reset()
    list(smol_pair.generate(prompt, cfg))  # the first time
    smol_pair.reset(lookup=False)  # a new request: caches gone, lookup's memory kept
    events = list(smol_pair.generate(prompt, cfg))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert_same_greedy(smol_pair, prompt, plain, done.tokens, str(memory))
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert sum(s.lookup_earlier for s in steps) == done.stats.lookup_earlier <= done.stats.lookup_accepted
    if memory == LookupMemory.PAIR:
        assert done.stats.lookup_earlier > len(done.tokens) // 2  # most of the reply is the first one's copy
    else:
        assert done.stats.lookup_earlier == 0
