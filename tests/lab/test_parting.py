"""``parting.divergence``: where two greedy outputs part, the gap read from the row plain decoding computed, and the
rounding that batched passes measurably cause along the same text."""

from __future__ import annotations

import pytest

from app.engine.events import TokenEvent
from app.engine.loop import GenConfig
from app.lab.parting import NEAR_TIE, divergence, near_tie, parting_words


def test_the_gap_where_outputs_part_is_the_plain_runs_own(smol_pair):
    """Plain decoding prefills the prompt less its last token and then steps one token at a time; the gap is
    that row's (a batched pass rounds the same row differently on quantised kernels, so it would misjudge a
    near-tie): the top two logprobs of the plain run at the parting position, to the bit."""
    prompt = smol_pair.completion_prompt("The three primary colours are")
    smol_pair.reset()
    events = [e for e in smol_pair.generate(prompt, GenConfig(max_tokens=8, speculative=False, logprobs=2))
              if isinstance(e, TokenEvent)]
    plain = [e.token for e in events]
    other = plain[:4] + [plain[4] + 1] + plain[5:]
    top = events[4].logprob.top
    got = divergence(smol_pair, prompt, plain, other)
    assert got["position"] == 4 and got["gap"] == pytest.approx(top[0].logprob - top[1].logprob, abs=1e-5)
    assert divergence(smol_pair, prompt, plain, plain) is None
    assert divergence(smol_pair, prompt, plain, plain[:6])["position"] == 6  # a shorter output parts where it ends


def test_a_parting_is_judged_against_the_rounding_measured_along_the_same_text(smol_pair):
    """Batched passes over plain's own tokens move each row's top-two gap a little: the largest move is the
    parting's ``rounding``, and a gap under it (or under ``NEAR_TIE``) is a near-tie, not a fault."""
    prompt = smol_pair.completion_prompt("The three primary colours are")
    smol_pair.reset()
    plain = [e.token for e in smol_pair.generate(prompt, GenConfig(max_tokens=12, speculative=False))
             if isinstance(e, TokenEvent)]
    got = divergence(smol_pair, prompt, plain, plain[:9] + [plain[9] + 1])
    assert got["position"] == 9 and 0.0 <= got["rounding"] < 1.0  # rounding, far below a real choice
    assert got["near_tie"] == (got["gap"] < max(NEAR_TIE, got["rounding"]))


def test_the_verdict_takes_the_larger_of_the_floor_and_the_measured_rounding():
    assert near_tie({"gap": 0.05}) and not near_tie({"gap": 0.127})
    assert near_tie({"gap": 0.127, "rounding": 0.39}) and not near_tie({"gap": 0.5, "rounding": 0.39})
    assert near_tie({"gap": 0.05, "rounding": 0.001})  # never under the floor seen on every machine
    words = parting_words({"gap": 0.127, "rounding": 0.393})
    assert words == ("top-1/top-2 logit gap 0.127; batched passes move this reply's gaps by up to 0.39 here: "
                     "a near-tie, which kernels may round either way")
    assert parting_words({"gap": 2.5, "rounding": 0.39}).endswith("not a near-tie: a fault")
