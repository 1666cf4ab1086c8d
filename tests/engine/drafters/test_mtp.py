"""MTP: the target drafts with its own NextN head, on made-up Qwen3.5 models (tests/support/tinymtp.py).

Random weights: correctness only (lossless output, rollback, the head's protocol), never quality or speed. The
``noisy`` target's head disagrees with it often (rejections); the ``copy`` target's head predicts exactly what
the target will (every draft accepted). Qwen3.5 is hybrid, so the target's rollbacks go through llama.cpp's
recurrent-state snapshots while the head's plain KV cache drops its drafted entries.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.llama.backend import Model
from app.engine.loop import GenConfig
from app.engine.llama.memory import Way
from app.engine.drafters.mtp import MtpHead, MtpUnavailable
from app.engine.pair import Pair
from app.testing import load_options
from support.loopchi2 import assert_pair_keeps_law
from support.mtpcheck import RecordingMtp, plain_tokens
from support.tinymtp import write_qwen35_mtp
from support.greedy import checked_run

PROMPT = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def mtp_files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("mtp")
    vocab = smol_paths[1]
    return {
        "noisy": write_qwen35_mtp(d / "noisy.gguf", vocab, seed=1),
        "copy": write_qwen35_mtp(d / "copy.gguf", vocab, seed=2, trunk=0.0, head=0.0, mix=0.0),
        "none": write_qwen35_mtp(d / "none.gguf", vocab, seed=1, mtp=False),
    }


@pytest.fixture(scope="module")
def mtp_pair(mtp_files):
    pair = Pair.load(mtp_files["noisy"], None, load_options(n_ctx=1024))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def mtp_fresh(mtp_files):
    """A second copy of the noisy target: plain references and the protocol's reference rows."""
    with Model(mtp_files["noisy"], load_options(n_ctx=1024)) as m:
        yield m



def test_mtp_head_loads_on_the_target(mtp_pair, mtp_files):
    t = mtp_pair.target
    assert t.hidden is not None and t.recurrent and mtp_pair.has_mtp
    head = mtp_pair.mtp_head()
    assert head is mtp_pair.mtp_head() and head.n_embd == t.hidden.n_embd
    with Pair.load(mtp_files["none"], None, load_options(n_ctx=256)) as bare:
        assert not bare.has_mtp
        with pytest.raises(MtpUnavailable, match="no MTP"):
            bare.proposer(GenConfig(proposer="mtp"))
    with Pair.load(mtp_files["noisy"], None, load_options(n_ctx=256, load_mtp=False)) as off:
        assert not off.has_mtp
        with pytest.raises(MtpUnavailable, match="without its MTP layers"):
            off.mtp_head()


@pytest.mark.parametrize("k", [1, 3, "auto"])
def test_mtp_greedy_speculative_equals_plain_with_rejections(mtp_pair, mtp_fresh, k):
    prompt = mtp_pair.target.tokenize(PROMPT)
    plain = plain_tokens(mtp_fresh, prompt, 60)
    mtp_pair.reset()
    before = mtp_pair.target.memory_counts()
    cfg = GenConfig(max_tokens=60, k=k, proposer="mtp")
    out, stats = checked_run(mtp_pair.target, prompt, cfg, mtp_pair.proposer(cfg))
    assert out == plain
    if k != "auto":  # auto K may rightly pause on this made-up head; fixed K must draft and be rejected
        assert stats.drafted > 0 and stats.rejections > 0 and stats.accepted > 0
    if k == 3:  # rejected draft tokens leave the hybrid target through llama.cpp's snapshots
        assert mtp_pair.target.memory_counts()[Way.SNAPSHOT] > before[Way.SNAPSHOT]
    head = mtp_pair.mtp_head()
    assert head.n_clean <= len(head.cached) <= mtp_pair.target.n_past + 1 + 3


def test_mtp_copy_head_accepts_everything(mtp_files):
    """A head that predicts exactly what the target will: every draft accepted, so the tokens, positions and
    rows are paired as llama.cpp's driver pairs them."""
    with Pair.load(mtp_files["copy"], None, load_options(n_ctx=512)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        plain = plain_tokens(pair.target, prompt, 40)
        pair.reset()
        cfg = GenConfig(max_tokens=40, k=4, proposer="mtp")
        out, stats = checked_run(pair.target, prompt, cfg, pair.proposer(cfg))
        assert out == plain and stats.rejections == 0 and stats.acceptance_rate == 1.0 and stats.drafted > 20



def test_mtp_drafts_equal_a_fresh_head_fed_in_one_batch(mtp_pair, mtp_fresh):
    """The protocol: after rejections, catch-ups and rollbacks, each draft equals what a fresh target and a
    fresh head compute from the whole history at once (entry j = (x_j, h_{j-1})). The noisy head reads h, so a
    row paired with the wrong token would change the drafts."""
    prompt = mtp_pair.target.tokenize(PROMPT)
    mtp_pair.reset()
    rec = RecordingMtp(mtp_pair.mtp_head())
    checked_run(mtp_pair.target, prompt, GenConfig(max_tokens=40, k=3, proposer="mtp"), rec)
    checked = 0
    with MtpHead(mtp_fresh) as ref:
        for history, drafted in rec.calls[::3]:
            mtp_fresh.reset()
            mtp_fresh.sync(history[:-1], need_logits=False)
            ref.reset()
            logits = ref.sync(history)
            for d in drafted:
                assert int(np.argmax(logits)) == d
                logits = ref.decode([d])[0]
            checked += len(drafted)
    assert checked > 5


def test_mtp_chat_prefix_reuse(mtp_pair, mtp_fresh):
    """Turn 2 extends turn 1: the target and the head keep what they hold and feed only the new tokens; a turn
    that rewrites the end is rolled back. Either way the output equals a fresh model's."""
    target = mtp_pair.target
    mtp_pair.reset()
    cfg = GenConfig(max_tokens=30, k=3, proposer="mtp")
    turn1 = target.tokenize(PROMPT)
    out1, _ = checked_run(target, turn1, cfg, mtp_pair.proposer(cfg))
    turn2 = turn1 + out1 + target.tokenize(" And then", add_special=False)
    head = mtp_pair.mtp_head()
    assert head.missing(turn2) < len(turn2) - len(turn1)  # the head keeps the first turn
    before = target.memory_counts()
    out2, _ = checked_run(target, turn2, cfg, mtp_pair.proposer(cfg))
    assert target.memory_counts()[Way.REPREFILL] == before[Way.REPREFILL]
    assert out2 == plain_tokens(mtp_fresh, turn2, 30)
    rewritten = turn2 + out2[:5] + target.tokenize(" but", add_special=False)
    out3, _ = checked_run(target, rewritten, cfg, mtp_pair.proposer(cfg))
    assert out3 == plain_tokens(mtp_fresh, rewritten, 30)


def test_mtp_sampling_keeps_the_target_distribution(mtp_pair, mtp_fresh):
    """χ² on the joint law of the first two tokens at T = 1, top-k 3, through the real loop with rejection
    sampling against the head's own q (rejected tokens are rolled back in between)."""
    assert_pair_keeps_law(mtp_pair, mtp_fresh, mtp_pair.target.tokenize(PROMPT), "mtp")


def test_mtp_is_a_tune_candidate_and_sweeps(mtp_pair):
    """The Pair lab offers the MTP head for a target that has one (never for one that has not) and measures it."""
    from app.lab import tune
    from app.lab.lab import LabRequest, plan

    cfg = plan(mtp_pair, LabRequest(drafts="lookup,mtp", ks="2", quick=True, max_tokens=16))
    assert [c.id for c in cfg.candidates] == ["lookup", "mtp"]
    result = tune.sweep(mtp_pair, cfg)
    cells = [c for c in result.cells if c["proposer"] == "mtp"]
    assert cells and cells[0]["acceptance_rate"] is not None and not result.errors


def test_mtp_not_offered_without_a_head(mtp_files):
    from app.lab.lab import LabRequest, plan

    with Pair.load(mtp_files["none"], None, load_options(n_ctx=256)) as bare:
        assert "mtp" not in [c.id for c in plan(bare, LabRequest(drafts="all", quick=True)).candidates]
        with pytest.raises(ValueError, match="unknown draft 'mtp'"):
            plan(bare, LabRequest(drafts="mtp", quick=True))


def test_mtp_compat_check_says_no_draft_is_needed(mtp_files):
    from app.models import archs, compat

    v = compat.check_pair(str(mtp_files["noisy"]), str(mtp_files["none"]), remember=False)
    assert v.ok and "no separate draft needed" in v.extra["mtp"]
    assert any("target (qwen35) has hybrid/recurrent memory" in n for n in v.extra["memory"])
    assert "mtp" not in compat.check_pair(str(mtp_files["none"]), str(mtp_files["noisy"]), remember=False).extra
    assert "needs a separate draft" in archs.mtp_note("glm4", 1) and archs.mtp_note("qwen35", 0) is None
