"""Auto K's pause on the real demo pair: plain steps taken because drafting is expected to lose are ordinary
target steps (identical output), the draft model is not woken for them, and the reason is reported."""

from __future__ import annotations

from app.engine.control.draftlen import CONFIRM, FIRST_K, DraftLength
from app.engine.events import DoneEvent, StepEvent, TokenEvent
from app.engine.loop import GenConfig, generate

from support.greedy import RecordingTarget, argmax_misses


class ScriptedCosts(DraftLength):
    """The real controller, fed scripted timings instead of the machine's (so what it decides does not depend
    on the load of the test machine): verifying n tokens costs n steps, a draft token half a step."""

    def update(self, drafted, accepted, t_draft, t_verify, synced=1, t_sync=0.0, free=0, tail=0, extra=0):
        super().update(drafted, accepted, 0.03 * (drafted - free), 0.06 * (drafted + 1), synced, free=free)


def paused_controller(k_max: int = 16) -> DraftLength:
    """A controller that has measured a pair where no K can pay, its pause confirmed by probes."""
    length = ScriptedCosts("auto", k_max)
    length.update(0, 0, 0.0, 0.0)
    for _ in range(3):
        length.update(4, 3, 0.0, 0.0)
        length.update(0, 0, 0.0, 0.0)
    assert length.paused and not length.can_pay()
    length.evidence = CONFIRM  # (a pause resting on fewer probes is re-tested at the next generation)
    return length


def test_paused_auto_k_decodes_plainly_and_identically(smol_pair):
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "List three uses of a paperclip."}])
    plain_cfg = GenConfig(max_tokens=48, speculative=False)
    plain = [ev.token for ev in generate(smol_pair.target, prompt, plain_cfg) if isinstance(ev, TokenEvent)]

    smol_pair.reset()
    length = paused_controller()
    length.since_probe = length.gap  # the next step is a free probe: prompt lookup, not the draft model
    cfg = GenConfig(max_tokens=48)
    target = RecordingTarget(smol_pair.target)
    events = list(generate(target, prompt, cfg, smol_pair.proposer(cfg), length=length))
    assert argmax_misses(target.passes, events) == []
    tokens = [ev.token for ev in events if isinstance(ev, TokenEvent)]
    steps = [ev for ev in events if isinstance(ev, StepEvent)]
    done = events[-1]
    assert tokens == plain
    assert isinstance(done, DoneEvent)
    assert all(s.paused or s.probe for s in steps)
    assert sum(s.paused for s in steps) >= len(steps) - 2
    assert all(s.limit and "cannot pay" in s.limit for s in steps if s.paused)
    assert done.stats.paused_steps == sum(s.paused for s in steps)
    assert "cannot pay" in done.stats.limit
    assert smol_pair.draft.cached == []  # never woken: no prefill, no catch-up


def test_fresh_auto_k_measures_a_plain_step_then_a_short_draft(smol_pair):
    """What a fresh controller does first does not depend on timings: a plain pass, then a FIRST_K draft."""
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Write a Python function that adds two numbers."}])
    cfg = GenConfig(max_tokens=16)
    smol_pair.reset()
    events = list(generate(smol_pair.target, prompt, cfg, smol_pair.proposer(cfg)))
    steps = [ev for ev in events if isinstance(ev, StepEvent)]
    assert steps[0].k == 0 and not steps[0].paused and not steps[0].probe  # measuring, not pausing
    assert steps[1].probe and steps[1].k == FIRST_K and steps[1].drafted > 0
