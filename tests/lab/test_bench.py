"""``bench.divergence``: where two greedy outputs part, the gap is read from the row plain decoding computed."""

from __future__ import annotations

import pytest

from app.engine.events import TokenEvent
from app.engine.loop import GenConfig
from app.lab.bench import divergence


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
