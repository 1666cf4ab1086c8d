"""The auto draft length follows acceptance and costs, and steps aside when drafting cannot pay (pure,
simulated steps: timings are injected, so these tests say what the controller decides, not how fast)."""

from __future__ import annotations

import numpy as np

from app.engine.control.draftlen import GAP_MAX, DraftLength
from app.engine.stats import expected_tokens


class Sim:
    """A simulated pair: per-token acceptance ``alpha`` (``alpha_free`` for free lookup proposals), draft
    seconds per token ``t_draft``, verify seconds ``a + b n``, with multiplicative timing noise."""

    def __init__(self, alpha, t_draft, a, b, noise=0.05, alpha_free=0.5, seed=0):
        self.alpha, self.t_draft, self.a, self.b = alpha, t_draft, a, b
        self.noise, self.alpha_free = noise, alpha_free
        self.rng = np.random.default_rng(seed)
        self.ks: list[int] = []
        self.tokens = 0

    def jitter(self, t: float) -> float:
        return t * (1.0 + self.noise * self.rng.uniform(-1, 1))

    def run(self, length: DraftLength, steps: int) -> DraftLength:
        for _ in range(steps):
            k = length.k
            self.ks.append(k)
            free = length.free_probe
            alpha = self.alpha_free if free else self.alpha
            accepted = 0
            while accepted < k and self.rng.random() < alpha:
                accepted += 1
            self.tokens += accepted + 1
            t_draft = 0.0 if free else self.jitter(self.t_draft * (k or length.wake))  # (wake: timed, not proposed)
            length.update(k, accepted, t_draft, self.jitter(self.a + self.b * (k + 1)))
        return length


def rate(alpha: float, k: int, c: float, a: float, b: float) -> float:
    return expected_tokens(alpha, k) / (k * c + a + b * (k + 1))


def auto(k_max: int = 16) -> DraftLength:
    return DraftLength("auto", k_max=k_max)


def test_auto_k_is_within_a_few_percent_of_the_best_fixed_k():
    """Ten seeds each. Where drafting pays well, every run ends near the best K; at alpha = 0.7 with a dear
    draft the best K runs only 1.17x plain, and a run of rejections early on can pause it (an unlucky streak
    reads as alpha below 0.6, where no K pays): most runs must still end drafting near the best K."""
    for alpha, c, a, b, need in [(0.98, 0.4, 1.0, 0.1, 10), (0.7, 0.4, 1.0, 0.1, 5), (0.9, 0.05, 1.0, 0.01, 10)]:
        best = max(rate(alpha, k, c, a, b) for k in range(1, 17))
        good = 0
        for seed in range(10):
            length = Sim(alpha, c, a, b, seed=seed).run(auto(), 200)
            good += abs(length.alpha - alpha) < 0.1 and not length.paused \
                and rate(alpha, length.k, c, a, b) >= 0.95 * best
        assert good >= need, (alpha, c, good)


def test_cheap_drafts_and_flat_verification_draft_longer():
    gpu_like = Sim(0.85, t_draft=0.03, a=1.0, b=0.005).run(auto(), 200)
    cpu_like = Sim(0.85, t_draft=0.45, a=1.0, b=0.12).run(auto(), 200)
    assert gpu_like.k > cpu_like.k >= 1


def test_fixed_k_never_moves():
    length = DraftLength(5, k_max=16)
    length.update(5, 0, 0.1, 1.0)
    length.update(5, 5, 0.1, 1.0)
    assert length.k == 5 and not length.paused


def test_steps_aside_where_verify_costs_a_step_per_token():
    """The Qwen 1.5B <- 0.5B case on a 2-core CPU: alpha 0.83, c 0.53, verifying n tokens costs ~n steps.
    No K pays even with a perfect draft, so auto K pauses, probes only with free proposals, and says why."""
    sim = Sim(0.83, t_draft=0.053, a=0.004, b=0.1)
    length = sim.run(auto(), 400)
    assert length.paused and length.k == 0
    assert not length.can_pay()
    assert sum(k > 0 for k in sim.ks) <= 8  # two measuring steps, then a few probes at growing gaps
    assert "cannot pay" in length.limit() and "verifying 5 tokens costs" in length.limit()
    assert sim.ks[:2] == [0, 4]  # it measured a plain pass and a short draft before deciding
    assert sim.tokens >= 0.97 * len(sim.ks)  # what the probes cost, in steps, is a few per cent at most


class SlowSpells(Sim):
    """The machine has slow spells (another process takes the cores): every pass runs 3x slower for a while."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.spell = 0

    def jitter(self, t: float) -> float:
        if self.spell == 0 and self.rng.random() < 0.02:
            self.spell = int(self.rng.integers(5, 40))
        slow = 3.0 if self.spell > 0 else 1.0
        self.spell = max(0, self.spell - 1)
        return super().jitter(t) * slow


def test_slow_spells_do_not_talk_a_paused_controller_into_drafting():
    for seed in range(10):
        sim = SlowSpells(0.9, t_draft=0.053, a=0.004, b=0.1, seed=seed)
        length = sim.run(auto(), 100)
        assert length.paused
        drafted_before = sum(k > 0 for k in sim.ks)
        sim.run(length, 1000)
        assert sum(k > 0 for k in sim.ks) - drafted_before <= 12, (seed, sim.ks[100:])


def test_pauses_when_acceptance_is_what_limits_and_says_so():
    sim = Sim(0.25, t_draft=0.4, a=1.0, b=0.1)
    length = sim.run(auto(), 300)
    assert length.paused and length.can_pay()
    assert "agrees with the target" in length.limit()
    assert not length.free_probe  # acceptance is measured with the real draft


def test_finds_speculation_within_the_first_16_tokens_where_it_pays():
    """The demo pair on a 2-core CPU: alpha 0.975, c 0.45, a 9-token verify costs 2 steps."""
    for seed in range(20):
        sim = Sim(0.975, t_draft=0.45 * 8 / 7, a=1.0, b=1 / 7, seed=seed)
        length = auto()
        tokens_before = None
        for _ in range(20):
            if length.k >= 4 and tokens_before is None:
                tokens_before = sim.tokens
            sim.run(length, 1)
        assert tokens_before is not None and tokens_before <= 16, (seed, sim.ks)
        assert not length.paused


def test_resumes_when_drafting_would_pay_again():
    sim = Sim(0.9, t_draft=0.05, a=0.004, b=0.1)
    length = sim.run(auto(), 300)
    assert length.paused
    sim.a, sim.b = 1.0, 0.01  # the machine changes: verification becomes nearly flat (say, a GPU offload)
    sim.run(length, GAP_MAX + 50)
    assert not length.paused and length.k >= 4


def test_memory_carries_across_generations():
    sim = Sim(0.83, t_draft=0.053, a=0.004, b=0.1)
    length = sim.run(auto(), 100)
    assert length.paused
    length.begin()  # the next request on the same pair starts paused: no re-measuring at every message
    assert length.paused and length.k == 0
    fresh = auto()
    assert fresh.k == 0 and not fresh.paused  # a fresh controller measures a plain step first


def test_a_retest_probes_a_confirmed_pause_on_acceptance_and_leaves_a_pause_on_cost():
    sim = Sim(0.25, t_draft=0.4, a=1.0, b=0.1)
    length = sim.run(auto(), 300)  # paused on acceptance, confirmed by probes
    length.begin()
    assert length.paused and not length.probing  # a confirmed pause is not re-tested at every request …
    length.retest()  # … unless the drafter says what it measured no longer holds (auto: a new text, no holes)
    assert length.probing and not length.free_probe and length.k > 0
    cost = Sim(0.83, t_draft=0.053, a=0.004, b=0.1)  # paused because verifying costs a step per token
    length = cost.run(auto(), 100)
    assert length.paused and length.culprit() != "acceptance"
    length.retest()
    assert not length.probing and length.k == 0


def test_a_retest_for_a_free_drafter_probes_until_enough_tokens_were_judged():
    """One probe judges a single token where its first is wrong; a re-test that asks for 8 keeps probing, step
    after step, until 8 were judged (or drafting resumes), then the pause's gaps resume."""
    sim = Sim(0.25, t_draft=0.4, a=1.0, b=0.1)  # paused on acceptance
    length = sim.run(auto(), 300)
    assert length.paused and length.culprit() == "acceptance" and length.evidence >= 2
    length.begin()
    length.retest(8)
    probes = 0
    while length.probing:
        judged_before = length.retest_left
        sim.alpha = 0.0  # every first token wrong: a probe judges one token
        sim.run(length, 1)
        probes += 1
        assert length.retest_left == judged_before - 1
    assert probes == 8 and length.paused and length.retest_left == 0
    length.begin()
    length.retest(8)
    sim.alpha = 0.95  # a text that copies: the re-test resumes drafting
    sim.run(length, 8)
    assert not length.paused and length.k > 0


def test_the_drafts_reading_is_held_where_the_tokens_left_cannot_pay_it_back():
    """A draft that pays (1.6x here) must first read what it has not seen (a long prompt, a lookup stretch):
    the step is plain, with the words why, where that reading costs more than drafting could save in the tokens
    the generation may still write; the pair stays a drafting pair (the next step is weighed again)."""
    sim = Sim(0.9, t_draft=0.2, a=1.0, b=0.3)
    length = sim.run(auto(), 100)
    assert not length.paused and length.k > 0 and length.reads
    saving = length.saving(100)
    assert saving > 0
    length.hold(saving * 0.5, 100, unread=40)  # cheap enough: drafts
    assert length.held is None and length.k > 0
    length.hold(saving * 2, 100, unread=600)  # a 600-token prompt for a 100-token reply: plain
    assert length.held and length.k == 0 and length.paused and "600 tokens" in length.limit()
    assert length.hold(saving * 2, 1000, unread=600) is None and length.k > 0  # … a long reply pays it back
    length.hold(saving * 2, 100, unread=600)
    sim.run(length, 1)  # the held step was plain
    assert sim.ks[-1] == 0 and length.held is None and not length.paused and length.k > 0


def test_a_probe_that_would_read_more_than_the_reply_can_pay_back_waits_for_the_next_gap():
    """A pause on acceptance is re-tested with the real draft; the probe is priced at the prior's acceptance (it
    asks whether this text suits the draft better), and put off where even then its reading cannot pay back."""
    sim = Sim(0.25, t_draft=0.4, a=1.0, b=0.1)
    length = sim.run(auto(), 300)
    length.retest()
    assert length.probing and length.reads
    assert length.worth_reading(1.0, 1000)  # at the prior's acceptance drafting would save more than that
    length.hold(1.0, 1000, unread=50)
    assert length.probing and length.k > 0
    length.hold(1e6, 10, unread=5000)
    assert not length.probing and length.paused and length.k == 0 and length.since_probe == 0
    assert "agrees with the target" in length.limit()  # the pause's own words stand
    cost = Sim(0.83, t_draft=0.053, a=0.004, b=0.1)  # where no K pays, no reading is worth anything
    paused = cost.run(auto(), 100)
    assert paused.saving(10_000, alpha=0.9) == 0 and not paused.worth_reading(1e-6, 10_000)
    assert auto().worth_reading(1e6, 1)  # nothing measured yet: the first measurement is paid once


def test_a_paused_controller_re_measures_forgotten_costs_with_what_reads_nothing():
    """A load change makes the controller forget its costs; paused, it re-measures them with a wake (the draft's
    cost, timed on what its cache holds) and a free probe (the verify cost), keeping acceptance: a probe with
    the real draft would first read everything since the prompt."""
    sim = Sim(0.25, t_draft=0.4, a=1.0, b=0.1)
    length = sim.run(auto(), 300)
    alpha = length.alpha
    assert length.paused and length.measured()
    sim.t_draft, sim.a, sim.b = 0.4 / 50, 1.0 / 50, 0.1 / 50  # the other program stopped: everything 50x faster
    phases = []
    for _ in range(12):
        phases.append(length.phase.value)
        sim.run(length, 1)
    assert "probing" not in phases and "measuring" not in phases, phases
    assert "waking" in phases and "free probe" in phases and length.measured()
    assert abs(length.alpha - alpha) < 0.05
