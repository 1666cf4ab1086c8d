"""The one sampler (decoding/sampling.py) on hand-made logits: llama.cpp's repetition penalty, greedy as the
temperature-0 case of sampling, and top-k / top-p / min-p keeping the most likely tokens. Pure numpy."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.decoding.sampling import SamplerSettings, distribution, greedy_token, penalise, recent_window

LOGITS = np.array([2.0, 1.0, 0.5, -1.0, 3.0], dtype=np.float32)


def test_the_repetition_penalty_divides_positive_logits_and_multiplies_negative_ones_once_per_token():
    out = penalise(LOGITS, [4, 4, 3], 2.0)
    assert out[4] == pytest.approx(1.5) and out[3] == pytest.approx(-2.0)
    assert np.array_equal(out[:3], LOGITS[:3]) and np.array_equal(penalise(LOGITS, [4], 1.0), LOGITS)


def test_the_penalty_sees_only_the_last_repeat_last_n_tokens():
    s = SamplerSettings(repeat_penalty=1.3, repeat_last_n=2)
    assert list(recent_window([1, 2, 3, 4], s)) == [3, 4]
    assert recent_window([1, 2, 3], SamplerSettings()) == ()  # no penalty: no window


def test_greedy_is_the_argmax_after_the_penalty():
    assert greedy_token(LOGITS, SamplerSettings(), []) == 4
    assert greedy_token(LOGITS, SamplerSettings(repeat_penalty=2.0), [4]) == 0  # 3.0 / 2 < 2.0


def test_temperature_zero_is_a_one_hot_distribution():
    p = distribution(LOGITS, SamplerSettings(), [])
    assert p[4] == 1.0 and p.sum() == 1.0


def test_an_untruncated_distribution_is_the_softmax_at_the_temperature():
    p = distribution(LOGITS, SamplerSettings(temperature=0.5), [])
    z = LOGITS.astype(np.float64) / 0.5
    assert np.allclose(p, np.exp(z - z.max()) / np.exp(z - z.max()).sum())


@pytest.mark.parametrize("settings, kept", [
    (SamplerSettings(temperature=1.0, top_k=2), {4, 0}),
    (SamplerSettings(temperature=1.0, top_p=0.6), {4}),
    (SamplerSettings(temperature=1.0, min_p=0.3), {4, 0}),
])
def test_truncation_keeps_the_most_likely_tokens_and_renormalises(settings, kept):
    p = distribution(LOGITS, settings, [])
    assert set(np.flatnonzero(p)) == kept and p.sum() == pytest.approx(1.0)
