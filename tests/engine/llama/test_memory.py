"""Speculation on hybrid (recurrent + attention) memory, with made-up LFM2 models (tests/support/tinyhybrid.py).

Random weights: these check correctness only (lossless output, rollback, prefix reuse), never quality or
speed. The draft written with another seed disagrees with the target often (rejections, so rollbacks);
the draft with the target's own weights always agrees.
"""

from __future__ import annotations

import pytest

from app.engine.llama.backend import Model, RollbackError
from app.engine.events import DoneEvent
from app.engine.loop import GenConfig, generate
from app.engine.llama.memory import Way
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.decoding.sampling import SamplerSettings
from app.testing import load_options
from support.loopchi2 import assert_keeps_law, two_token_law
from support.tinyhybrid import write_lfm2
from support.greedy import checked_run

PROMPT = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def hybrid_files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("hybrid")
    vocab = smol_paths[1]
    return (write_lfm2(d / "target.gguf", vocab, seed=1), write_lfm2(d / "draft.gguf", vocab, seed=2, n_layer=2))


@pytest.fixture(scope="module")
def hybrid_models(hybrid_files):
    t, d = hybrid_files
    models = [Model(t, load_options(n_ctx=1024)), Model(d, load_options(n_ctx=1024)), Model(t, load_options(n_ctx=1024))]
    yield models
    for m in models:
        m.close()


def _fresh(*models):
    for m in models:
        m.reset()


def test_hybrid_model_loads_with_rollback_snapshots(hybrid_models):
    target, draft, _ = hybrid_models
    assert target.recurrent and draft.recurrent
    assert target.n_rs_seq >= 17 and target.rollback_limit == min(target.n_rs_seq, target.n_batch - 1)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_hybrid_greedy_speculative_equals_plain_with_rejections(hybrid_models, k):
    target, draft, _ = hybrid_models
    prompt = target.tokenize(PROMPT)
    _fresh(target)
    plain, _ = checked_run(target, prompt, GenConfig(max_tokens=60, speculative=False))
    _fresh(target, draft)
    before_t, before_d = target.memory_counts(), draft.memory_counts()
    out, stats = checked_run(target, prompt, GenConfig(max_tokens=60, k=k), DraftModelProposer(draft))
    assert out == plain
    assert stats.rejections > 0 and stats.accepted > 0
    if k > 1:  # a rejection drops draft tokens from the target: llama.cpp's in-ubatch snapshots do it
        assert target.memory_counts()[Way.SNAPSHOT] > before_t[Way.SNAPSHOT]
        assert draft.memory_counts()[Way.CHECKPOINT] > before_d[Way.CHECKPOINT]  # drafted one token at a time
    assert target.memory_counts()[Way.REPREFILL] == before_t[Way.REPREFILL]


def test_hybrid_same_weights_draft_accepts_everything(hybrid_models):
    target, _, same = hybrid_models
    prompt = target.tokenize(PROMPT)
    _fresh(target)
    plain, _ = checked_run(target, prompt, GenConfig(max_tokens=40, speculative=False))
    _fresh(target, same)
    out, stats = checked_run(target, prompt, GenConfig(max_tokens=40, k=4), DraftModelProposer(same))
    assert out == plain and stats.rejections == 0 and stats.acceptance_rate == 1.0


def test_hybrid_auto_k_equals_plain(hybrid_models):
    target, draft, _ = hybrid_models
    prompt = target.tokenize(PROMPT)
    _fresh(target)
    plain, _ = checked_run(target, prompt, GenConfig(max_tokens=50, speculative=False))
    _fresh(target, draft)
    out, stats = checked_run(target, prompt, GenConfig(max_tokens=50), DraftModelProposer(draft))
    assert out == plain and stats.tokens == 50


def test_hybrid_draft_length_capped_by_snapshots(hybrid_files):
    t, d = hybrid_files
    with Model(t, load_options(n_ctx=512, rs_snapshots=3)) as target, Model(d, load_options(n_ctx=512)) as draft:
        assert target.rollback_limit == 3
        prompt = target.tokenize(PROMPT)
        plain, _ = checked_run(target, prompt, GenConfig(max_tokens=40, speculative=False))
        target.reset()
        events = list(generate(target, prompt, GenConfig(max_tokens=40, k=10), DraftModelProposer(draft)))
        steps = [e for e in events if type(e).__name__ == "StepEvent"]
        assert max(s.drafted for s in steps) == 3
        assert list(events[-1].tokens) == plain


def test_recurrent_without_snapshots_keeps_the_refusal(hybrid_files):
    t, d = hybrid_files
    with Model(t, load_options(n_ctx=512, rs_snapshots=0)) as target, Model(d, load_options(n_ctx=512)) as draft:
        assert target.recurrent and target.rollback_limit == 0
        prompt = target.tokenize(PROMPT)
        with pytest.raises(RollbackError, match="cannot roll back"):
            checked_run(target, prompt, GenConfig(max_tokens=8, k=2), DraftModelProposer(draft))
        out, _ = checked_run(target, prompt, GenConfig(max_tokens=8, speculative=False))  # plain still works
        assert len(out) == 8


def test_hybrid_chat_prefix_reuse(hybrid_models):
    """Turn 2 extends turn 1: only the new tokens are decoded. A turn that rewrites the end of the previous
    one goes back to the prompt's checkpoint. Either way the output equals a fresh model's."""
    target, draft, fresh = hybrid_models
    _fresh(target, draft)
    turn1 = target.tokenize(PROMPT)
    out1, _ = checked_run(target, turn1, GenConfig(max_tokens=30, k=3), DraftModelProposer(draft))
    turn2 = turn1 + out1 + target.tokenize(" And then", add_special=False)
    assert target.missing(turn2[:-1]) == len(turn2) - 1 - len(target.cached)  # the whole history is reused
    before = target.memory_counts()
    out2, _ = checked_run(target, turn2, GenConfig(max_tokens=30, k=3), DraftModelProposer(draft))
    assert target.memory_counts()[Way.REPREFILL] == before[Way.REPREFILL]
    _fresh(fresh)
    assert out2 == checked_run(fresh, turn2, GenConfig(max_tokens=30, speculative=False))[0]

    rewritten = turn2 + out2[:5] + target.tokenize(" but", add_special=False)  # drops most of the reply
    before = target.memory_counts()
    out3, _ = checked_run(target, rewritten, GenConfig(max_tokens=30, k=3), DraftModelProposer(draft))
    after = target.memory_counts()
    assert after[Way.CHECKPOINT] + after[Way.REPREFILL] > before[Way.CHECKPOINT] + before[Way.REPREFILL]
    _fresh(fresh)
    assert out3 == checked_run(fresh, rewritten, GenConfig(max_tokens=30, speculative=False))[0]


def test_hybrid_sampling_keeps_the_target_distribution(hybrid_models):
    """χ² on the joint law of the first two tokens at T = 1, top-k 3, through the real loop with rejection
    sampling against a draft that often disagrees (so rejected tokens are rolled back in between)."""
    target, draft, fresh = hybrid_models
    prompt = target.tokenize(PROMPT)
    _fresh(fresh)
    law = two_token_law(fresh, prompt, SamplerSettings(temperature=1.0, top_k=3))
    _fresh(target, draft)

    def first_two(seed: int) -> list[int]:
        cfg = GenConfig(max_tokens=2, k=2, sampler=SamplerSettings(temperature=1.0, top_k=3, seed=seed))
        events = generate(target, prompt, cfg, DraftModelProposer(draft))
        return [e for e in events if isinstance(e, DoneEvent)][0].tokens

    assert_keeps_law(law, first_two, draws=1500)


def test_compat_states_hybrid_memory(hybrid_files):
    from app.models import archs, compat

    t, d = hybrid_files
    v = compat.check_pair(str(t), str(d), remember=False)
    assert v.ok
    assert any("target (lfm2) has hybrid/recurrent memory" in n for n in v.extra["memory"])
    assert archs.memory("granitehybrid") is archs.Memory.NO_ROLLBACK and archs.memory("llama") is archs.Memory.KV
    assert "refused" in archs.memory_note("mamba2", "target")
