"""The coupled rule (Gumbel-max with noise fixed by (seed, position)): exact on synthetic distributions
(chi-squared), drafter-invariant by construction, and through the real loop the same text with speculation off,
K = 4 and auto K for a seed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from app.engine.decoding.coupled import GumbelNoise, NoiseRows, coupled_accept, gumbel_max, gumbel_noise
from app.engine.loop import GenConfig, run
from app.engine.decoding.sampling import SamplerSettings
from app.engine.decoding.verify import rejection_sample, sample_from

from support.coupled import parted

DRAWS = 20_000
CHI2_CRIT = {2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515}  # significance 0.001

CASES = {
    "overlapping": (np.array([0.1, 0.2, 0.3, 0.25, 0.15]), np.array([0.3, 0.3, 0.2, 0.1, 0.1])),
    "q_mass_where_p_has_none": (np.array([0.0, 0.5, 0.3, 0.2, 0.0]), np.array([0.4, 0.1, 0.1, 0.1, 0.3])),
    "p_mass_where_q_has_none": (np.array([0.3, 0.1, 0.2, 0.2, 0.2]), np.array([0.0, 0.6, 0.0, 0.4, 0.0])),
    "identical": (np.array([0.2, 0.2, 0.2, 0.2, 0.2]), np.array([0.2, 0.2, 0.2, 0.2, 0.2])),
}


def chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    mask = probs > 0
    expected = probs[mask] * counts.sum()
    assert counts[~mask].sum() == 0, "a token with zero target probability was emitted"
    return float(((counts[mask] - expected) ** 2 / expected).sum()), int(mask.sum() - 1)


def _step(p_rows, q_rows, seed: int, deterministic: bool) -> tuple[list[int], int]:
    """One coupled verification step at positions 0..gamma with the noise of ``seed``; (emitted, accepted)."""
    noise = NoiseRows(GumbelNoise(seed), 0, p_rows.shape[1])
    gamma = q_rows.shape[0]
    if deterministic:  # a proposer that ignores the noise (prompt lookup, another random source): q = onehot
        rng = np.random.default_rng(seed + 10 ** 6)
        draft = [sample_from(q_rows[i], rng) for i in range(gamma)]
    else:  # the draft samples with the same noise as the target
        draft = [gumbel_max(q_rows[i], noise[i]) for i in range(gamma)]
    n, nxt = coupled_accept(p_rows, draft, noise)
    return draft[:n] + [nxt], n


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("deterministic", [False, True])
def test_coupled_rule_emits_the_targets_distribution(case, deterministic):
    p, q = CASES[case]
    p2 = np.roll(p, 1)
    p_rows = np.stack([p, p2, p])
    q_rows = np.stack([q, np.roll(q, 2)])
    first, second = np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.int64)
    for seed in range(DRAWS):
        out, _ = _step(p_rows, q_rows, seed, deterministic)
        first[out[0]] += 1
        if len(out) > 1:
            second[out[1]] += 1
    stat, df = chi2(first, p)
    assert stat < CHI2_CRIT[df], f"first token: chi2={stat:.1f} (df={df}) counts={first}"
    stat, df = chi2(second, p2)
    assert stat < CHI2_CRIT[df], f"second token: chi2={stat:.1f} (df={df}) counts={second}"


def test_emitted_tokens_do_not_depend_on_the_draft():
    """Whatever is drafted (or nothing), the tokens emitted at each position are the target's own samples."""
    rng = np.random.default_rng(3)
    for seed in range(300):
        p_rows = rng.dirichlet(np.full(6, 0.5), size=4)
        noise = NoiseRows(GumbelNoise(seed), 0, 6)
        plain = [gumbel_max(p_rows[i], noise[i]) for i in range(4)]
        draft = [int(x) for x in rng.integers(0, 6, size=3)]
        n, nxt = coupled_accept(p_rows, draft, noise)
        assert draft[:n] + [nxt] == plain[:n + 1]


def test_coupled_acceptance_against_rejection_sampling():
    """Rejection sampling accepts with sum(min(p, q)); the coupling at least (1 - tv) / (1 + tv)."""
    p, q = CASES["overlapping"]
    tv = 0.5 * np.abs(p - q).sum()
    rng = np.random.default_rng(11)
    coupled = sum(_step(np.stack([p, p]), q[None], seed, False)[1] for seed in range(DRAWS)) / DRAWS
    rejection = sum(rejection_sample(np.stack([p, p]), q[None], [sample_from(q, rng)], rng)[0]
                    for _ in range(DRAWS)) / DRAWS
    assert rejection == pytest.approx(1 - tv, abs=0.02)
    assert (1 - tv) / (1 + tv) - 0.02 <= coupled <= rejection + 0.02


def test_noise_is_a_pure_function_of_seed_and_position():
    here = gumbel_noise(123, 45, 8)
    assert np.array_equal(here, GumbelNoise(123).at(45, 8))
    assert np.array_equal(gumbel_noise(123, 45, 20)[:8], here)  # a longer row extends a shorter one
    assert not np.array_equal(gumbel_noise(123, 46, 8), here)
    code = "from app.engine.decoding.coupled import gumbel_noise; print(gumbel_noise(123, 45, 8).tobytes().hex())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert bytes.fromhex(other.strip()) == here.tobytes()


def test_a_seed_holds_with_speculation_off_fixed_k_auto_k_and_prompt_lookup(smol_pair):
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Write a short poem about the sea."}])
    for seed in range(10):
        sampler = SamplerSettings(temperature=0.8, top_p=0.95, seed=seed)
        texts = []
        for kw in (dict(speculative=False), dict(k=4), dict(k="auto"), dict(proposer="lookup", k=4)):
            cfg = GenConfig(max_tokens=24, sampler=sampler, rule="coupled", **kw)
            smol_pair.reset()
            tokens, _ = run(smol_pair.target, prompt, cfg, smol_pair.proposer(cfg), length=smol_pair.draft_length(cfg))
            texts.append(tokens)
        for text in texts[1:]:  # the same text (or parted at a near-tie of two perturbed scores: support/coupled.py)
            why = parted(smol_pair, prompt, texts[0], text, sampler)
            assert why is None, f"seed {seed}: {why}: {texts}"
