"""Auto K recovers from a noisy spell and never stays paused on one bad sample, driven through the real decode
loop with the fake target and an injected clock: every pass and every draft token advances the clock by a
scripted cost, times a slowdown the test sets between steps (a hiccup, a busy spell), so what the controller
decides does not depend on the load of the test machine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.engine import loop
from app.engine.control.draftlen import BUSY, DraftLength
from app.engine.events import StepEvent
from app.engine.loop import GenConfig, generate
from app.engine.drafters.protocol import Draft, ProposerBase
from app.engine.decoding.sampling import SamplerSettings
from support.fake_target import FakeTarget

GREEDY = SamplerSettings(temperature=0.0)
PROMPT = [1, 2, 3, 4, 5]
VOCAB = 97  # the fake text repeats every 97 tokens, so prompt lookup finds matches as it does in real text


class Clock:
    """Seconds as the loop sees them; ``slow`` multiplies every cost (another program on the cores),
    ``slow_draft`` only the draft's."""

    def __init__(self):
        self.now, self.slow, self.slow_draft = 0.0, 1.0, 1.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds * self.slow


class TimedTarget(FakeTarget):
    """The fake target whose pass over n tokens costs ``a + b n`` seconds of the clock."""

    def __init__(self, clock: Clock, a: float, b: float):
        super().__init__(n_ctx=2048, vocab=VOCAB)
        self.clock, self.a, self.b = clock, a, b

    def decode(self, tokens, logits_for=(-1,)):
        self.clock.spend(self.a + self.b * len(tokens))
        return super().decode(tokens, logits_for)


class TimedDraft(ProposerBase):
    """A draft that is right except at every ``miss``-th token (acceptance ~ 1 - 1/miss) and costs ``t_d``
    seconds a token; ``time_tokens`` re-measures that cost without proposing (the loop's wake)."""

    name = "draft"

    def __init__(self, clock: Clock, t_d: float, miss: int = 12):
        self.clock, self.t_d, self.miss = clock, t_d, miss
        self.woken = 0

    def begin(self, prompt, warm=True) -> None:
        pass

    def _spend(self, k: int) -> float:
        t0 = self.clock()
        self.clock.spend(self.t_d * k * self.clock.slow_draft)
        return self.clock() - t0

    def propose(self, history, k, sampler, rng, sample) -> Draft:
        tokens = [(history[-1] + i + 1) % VOCAB for i in range(k)]
        for i in range(k):
            if (len(history) + i) % self.miss == 0:
                tokens[i] = (tokens[i] + 5) % VOCAB
        return Draft(tokens=tokens, probs=[0.9] * k, seconds=self._spend(k), synced=1)

    def time_tokens(self, history, k) -> float:
        self.woken += 1
        return self._spend(k)

    def close(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=c))
    return c


def steps_of(clock: Clock, length: DraftLength, target, draft, max_tokens: int, slow_at=None) -> list[StepEvent]:
    """Run one generation; ``slow_at(step) -> (slow, slow_draft)`` sets the clock before each step."""
    cfg = GenConfig(max_tokens=max_tokens, sampler=GREEDY, k="auto")
    steps: list[StepEvent] = []
    clock.slow, clock.slow_draft = slow_at(0) if slow_at else (1.0, 1.0)
    for ev in generate(target, PROMPT, cfg, draft, length=length):
        if isinstance(ev, StepEvent):
            steps.append(ev)
            if slow_at:
                clock.slow, clock.slow_draft = slow_at(len(steps))
    return steps


def drafting(s: StepEvent) -> bool:
    return s.drafted > 0 and not s.probe and not s.paused


def first_drafting_after(steps: list[StepEvent], start: int) -> int:
    return next(i for i, s in enumerate(steps) if i >= start and drafting(s))


# The demo pair on a 2-core CPU, in units of a target step: a draft token costs 0.45, verifying 9 tokens 2 steps.
DEMO = dict(a=6 / 7, b=1 / 7, t_d=0.45)


def test_a_10x_hiccup_on_the_first_measuring_step_does_not_lock_a_paying_pair_out(clock):
    target, draft = TimedTarget(clock, DEMO["a"], DEMO["b"]), TimedDraft(clock, DEMO["t_d"])
    steps = steps_of(clock, DraftLength("auto", 16), target, draft, 300,
                     slow_at=lambda i: (10.0, 1.0) if i == 1 else (1.0, 1.0))
    assert steps[1].probe and steps[1].drafted == 4  # the measuring step that hit the hiccup
    assert first_drafting_after(steps, 2) <= 64
    assert sum(s.paused for s in steps) <= 0.1 * len(steps)


def test_a_10x_draft_hiccup_on_the_first_measuring_step_is_re_measured(clock):
    """The case seen in the app: one draft-cost sample taken in a hiccup said "a draft token costs 6.2 of a
    target step", and the pair stayed paused for good. The pause is re-tested, and the draft woken."""
    target, draft = TimedTarget(clock, DEMO["a"], DEMO["b"]), TimedDraft(clock, DEMO["t_d"])
    steps = steps_of(clock, DraftLength("auto", 16), target, draft, 300,
                     slow_at=lambda i: (1.0, 14.0) if i == 1 else (1.0, 1.0))
    assert first_drafting_after(steps, 2) <= 64
    assert sum(s.paused for s in steps) <= 0.1 * len(steps)


@pytest.mark.parametrize("spell", [1, 8, 40])
def test_a_hiccup_or_busy_spell_mid_generation_is_followed_by_drafting_again(clock, spell):
    target, draft = TimedTarget(clock, DEMO["a"], DEMO["b"]), TimedDraft(clock, DEMO["t_d"])
    length = DraftLength("auto", 16)
    start = 60

    def slow_at(i):
        busy = start <= i < start + spell
        return (10.0, 1.0 if spell > 1 else 3.0) if busy else (1.0, 1.0)

    steps = steps_of(clock, length, target, draft, 900, slow_at=slow_at)
    assert drafting(steps[start - 1])  # it was drafting before the spell
    assert first_drafting_after(steps, start + spell) <= start + spell + 64
    assert not any(s.paused for s in steps[start + spell + 64:])  # and stays drafting once it is quiet again
    paused = [s for s in steps if s.paused and s.limit]
    assert all("busy" in s.limit for s in paused), {s.limit for s in paused}


def test_a_pair_that_truly_cannot_pay_stays_paused(clock):
    """Verifying n tokens costs n target steps (a compute-bound target on a CPU): no K pays, however often the
    draft is right; it stays paused, with probes at growing gaps, and says why."""
    target, draft = TimedTarget(clock, 0.02, 1.0), TimedDraft(clock, 0.5)
    length = DraftLength("auto", 16)
    steps = steps_of(clock, length, target, draft, 600)
    assert not any(drafting(s) for s in steps)
    assert sum(s.probe for s in steps) <= 10
    assert sum(s.paused for s in steps) >= 0.97 * len(steps)
    assert "cannot pay" in steps[-1].limit and "however often" in steps[-1].limit
    # the next generation starts paused: its pause rests on enough recent probes to carry over
    more = steps_of(clock, length, target, draft, 100)
    assert more[0].paused and sum(s.probe for s in more) <= 2


def test_a_pause_that_rests_on_few_samples_is_re_tested_at_the_next_generation(clock):
    """A controller that paused in a spell too short to confirm it drafts again at the next message."""
    target, draft = TimedTarget(clock, DEMO["a"], DEMO["b"]), TimedDraft(clock, DEMO["t_d"])
    length = DraftLength("auto", 16)
    steps = steps_of(clock, length, target, draft, 12, slow_at=lambda i: (1.0, 14.0) if i == 1 else (1.0, 1.0))
    assert steps[-1].paused
    more = steps_of(clock, length, target, draft, 40)
    assert more[0].probe and more[0].drafted > 0  # re-tested at once, with the real draft
    assert first_drafting_after(more, 1) <= 8


def test_a_paused_draft_cost_is_re_measured_by_waking_the_draft(clock):
    """Where the draft's cost is what the pause rests on, the draft is woken for a short timed draft at
    growing gaps (it proposes nothing), and drafting resumes when its cost falls."""
    target, draft = TimedTarget(clock, DEMO["a"], DEMO["b"]), TimedDraft(clock, 2.0)  # too dear to pay
    length = DraftLength("auto", 16)
    steps = steps_of(clock, length, target, draft, 400)
    assert not any(drafting(s) for s in steps[20:])
    assert length.culprit() == "draft" and draft.woken >= 1
    assert sum(s.drafted for s in steps[40:]) == 0  # confirmed: woken, never proposing
    draft.t_d = DEMO["t_d"]  # the machine changed: the draft got cheap (say, offloaded)
    more = steps_of(clock, length, target, draft, 700)
    assert any(drafting(s) for s in more)


def test_busy_words_name_the_jump(clock):
    length = DraftLength("auto", 16)
    for _ in range(3):
        length.update(0, 0, 0.0, 1.0)
    for _ in range(3):
        length.update(0, 0, 0.0, 6.0)
    assert length.jump() >= BUSY
    assert "busy: timings jumped 6x" in length._busy_words(length.jump())


def test_a_wake_and_a_free_probe_say_so_in_their_steps(clock):
    """The bench tells where a slow prompt's time went from the steps: a wake (the draft's cost re-measured by
    timing tokens it does not propose) and a free probe (the verify cost re-measured with prompt lookup's
    proposal) are marked as such, not guessed from their counts."""
    target, draft = TimedTarget(clock, DEMO["a"], DEMO["b"]), TimedDraft(clock, 1.0)  # a draft token: a step
    steps = steps_of(clock, DraftLength("auto", 16), target, draft, 400)
    wakes = [s for s in steps if s.wake]
    assert wakes and len(wakes) == draft.woken
    assert all(s.paused and not s.probe and not s.free_probe and s.drafted == 0 and s.t_draft > 0 for s in wakes)

    target, draft = TimedTarget(clock, 0.01, 1.0), TimedDraft(clock, DEMO["t_d"])  # no K pays, even a free draft
    steps = steps_of(clock, DraftLength("auto", 16), target, draft, 400)
    free = [s for s in steps if s.free_probe]
    assert free and all(s.probe and not s.wake and s.drafted > 0 for s in free)
    assert not any(s.wake for s in steps)
