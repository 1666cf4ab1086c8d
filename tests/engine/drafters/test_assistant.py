"""The Gemma-4 assistant drafter (the MTP drafter with shared memory) on a made-up Gemma-4 target and made-up
``gemma4-assistant`` GGUFs (tests/support/tinygemma4.py).

Random weights: correctness only (lossless output, drafting from the target's cache after rollbacks, the
protocol), never quality or speed. The ``noisy`` assistant disagrees with the target often (rejections); the
``copy`` one predicts exactly what its bigram target will (every draft accepted). The target's sliding window
(24 tokens) is shorter than the generations, so its cache is pruned while the assistant reads it.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.drafters.assistant import AssistantError, AssistantModel, gguf_arch, is_assistant
from app.engine.llama.backend import BackendError, Model
from app.engine.loop import GenConfig
from app.engine.drafters.mtp import MtpProposer
from app.engine.pair import Pair
from app.engine.decoding.sampling import SamplerSettings
from app.testing import load_options
from support.loopchi2 import assert_pair_keeps_law
from support.mtpcheck import RecordingMtp, plain_tokens
from support.tinygemma4 import write_gemma4, write_gemma4_assistant
from support.tinymtp import write_qwen35_mtp
from support.greedy import checked_run

PROMPT = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def g4_files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("gemma4")
    vocab = smol_paths[1]
    return {
        "target": write_gemma4(d / "target.gguf", vocab, seed=1),
        "assistant": write_gemma4_assistant(d / "assistant.gguf", vocab, seed=1),
        "bigram": write_gemma4(d / "bigram.gguf", vocab, seed=2, trunk=0.0),
        "copy": write_gemma4_assistant(d / "copy.gguf", vocab, seed=2, head=0.0, mix=0.0),
        "qwen35": write_qwen35_mtp(d / "qwen35.gguf", vocab, seed=1, mtp=False),
    }


@pytest.fixture(scope="module")
def g4_pair(g4_files):
    pair = Pair.load(g4_files["target"], g4_files["assistant"], load_options(n_ctx=1024))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def g4_fresh(g4_files):
    """A second copy of the target: plain references and the protocol's reference drafts."""
    with Model(g4_files["target"], load_options(n_ctx=1024)) as m:
        yield m



def test_gemma4_assistant_loads_as_the_draft(g4_pair, g4_files):
    assert gguf_arch(g4_files["assistant"]) == "gemma4-assistant" and is_assistant(g4_files["assistant"])
    assert not is_assistant(g4_files["target"])
    assert isinstance(g4_pair.draft, AssistantModel) and g4_pair.draft_kind == "assistant drafter"
    assert g4_pair.target.hidden is not None and not g4_pair.has_mtp
    assert isinstance(g4_pair.proposer(GenConfig(proposer="draft", k=2)), MtpProposer)


def test_gemma4_assistant_refused_alone_or_beside_another_arch(g4_files):
    with pytest.raises(BackendError, match="drafter: it runs only as the draft beside a gemma4 target"):
        Model(g4_files["assistant"], load_options(n_ctx=256))
    with pytest.raises(AssistantError, match="drafts only for gemma4 targets, not qwen35"):
        Pair.load(g4_files["qwen35"], g4_files["assistant"], load_options(n_ctx=256))


@pytest.mark.parametrize("k,proposer", [(1, "draft"), (3, "draft"), ("auto", "draft"), ("auto", "auto")])
def test_gemma4_assistant_greedy_speculative_equals_plain_with_rejections(g4_pair, g4_fresh, k, proposer):
    prompt = g4_pair.target.tokenize(PROMPT)
    plain = plain_tokens(g4_fresh, prompt, 60)
    g4_pair.reset()
    cfg = GenConfig(max_tokens=60, k=k, proposer=proposer)
    out, stats = checked_run(g4_pair.target, prompt, cfg, g4_pair.proposer(cfg), length=g4_pair.draft_length(cfg))
    assert out == plain
    if k != "auto":  # auto K may rightly pause on this made-up pair; fixed K must draft and be rejected
        assert stats.drafted > 0 and stats.rejections > 0 and stats.accepted > 0
    assert g4_pair.target.n_past == len(prompt) + len(out) - 1


def test_gemma4_assistant_hands_over_to_lookup(g4_pair):
    """The assistant drafter takes auto's handoff as the draft model does (it is one, on the target's rows)."""
    g4_pair.reset()
    prompt = g4_pair.target.tokenize(PROMPT)
    cfg = GenConfig(max_tokens=8, k=3, proposer="draft")
    out, _ = checked_run(g4_pair.target, prompt, cfg, g4_pair.proposer(cfg))
    history = prompt + out[:2]
    g4_pair.target.rollback(len(history) - 1)  # the target's cache holds the history but its last token, as in a step
    draft = g4_pair.proposer(cfg).propose(history, 2, SamplerSettings(), np.random.default_rng(0), False,
                                          handoff=lambda drafted: [5, 6], reach=4)
    assert len(draft.tokens) == 3 and draft.tokens[1:] == [5, 6] and draft.tail == 2


def test_gemma4_copy_assistant_accepts_everything(g4_files):
    """An assistant that predicts exactly what its target will: every draft accepted, so the tokens, rows and
    positions are paired as llama.cpp's driver pairs them."""
    with Pair.load(g4_files["bigram"], g4_files["copy"], load_options(n_ctx=512)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        plain = plain_tokens(pair.target, prompt, 40)
        pair.reset()
        cfg = GenConfig(max_tokens=40, k=4, proposer="draft")
        out, stats = checked_run(pair.target, prompt, cfg, pair.proposer(cfg))
        assert out == plain and stats.rejections == 0 and stats.acceptance_rate == 1.0 and stats.drafted > 20



def test_gemma4_assistant_drafts_equal_a_fresh_target_and_assistant(g4_pair, g4_fresh, g4_files):
    """Rollback: after rejections the target's cache (which the assistant reads) and rows are as a fresh
    target's that decoded the history at once, so each draft equals a fresh assistant's on that target. The
    noisy assistant attends to the target's cache and reads ``h``, so a stale entry or a wrong row would
    change the drafts."""
    prompt = g4_pair.target.tokenize(PROMPT)
    g4_pair.reset()
    rec = RecordingMtp(g4_pair.draft)
    _, stats = checked_run(g4_pair.target, prompt, GenConfig(max_tokens=50, k=3, proposer="draft"), rec)
    assert stats.rejections > 3
    checked = 0
    with AssistantModel(g4_files["assistant"], load_options(n_ctx=1024), g4_fresh) as ref:
        for history, drafted in rec.calls[::3]:
            g4_fresh.reset()
            g4_fresh.sync(history[:-1], need_logits=False)
            logits = ref.sync(history)
            for d in drafted:
                assert int(np.argmax(logits)) == d
                logits = ref.decode([d])[0]
            checked += len(drafted)
    assert checked > 5 and g4_fresh.hidden is None  # closing the assistant turned the rows it asked for off


def test_gemma4_assistant_chat_prefix_reuse(g4_pair, g4_fresh):
    """Turn 2 extends turn 1: the target keeps what it holds (the assistant holds nothing of its own); a turn
    that rewrites the end is rolled back. Either way the output equals a fresh model's, and resetting the
    assistant never clears the target's cache (its cells are the target's)."""
    target = g4_pair.target
    g4_pair.reset()
    cfg = GenConfig(max_tokens=30, k=3, proposer="draft")
    turn1 = target.tokenize(PROMPT)
    out1, _ = checked_run(target, turn1, cfg, g4_pair.proposer(cfg))
    turn2 = turn1 + out1 + target.tokenize(" And then", add_special=False)
    held = target.n_past
    g4_pair.draft.reset()
    assert target.missing(turn2[:-1]) == len(turn2) - 1 - held  # the first turn is still cached
    out2, _ = checked_run(target, turn2, cfg, g4_pair.proposer(cfg))
    assert out2 == plain_tokens(g4_fresh, turn2, 30)
    rewritten = turn2 + out2[:5] + target.tokenize(" but", add_special=False)
    out3, _ = checked_run(target, rewritten, cfg, g4_pair.proposer(cfg))
    assert out3 == plain_tokens(g4_fresh, rewritten, 30)


def test_gemma4_assistant_sampling_keeps_the_target_distribution(g4_pair, g4_fresh):
    """χ² on the joint law of the first two tokens at T = 1, top-k 3, through the real loop with rejection
    sampling against the assistant's own q (rejected tokens are rolled back in between)."""
    assert_pair_keeps_law(g4_pair, g4_fresh, g4_pair.target.tokenize(PROMPT), "draft")


def test_gemma4_assistant_swapped_out_and_back(g4_files, smol_paths):
    """The draft slot takes an assistant and gives it back: closing it turns the target's rows off, and a new
    one turns them on again; output stays the target's."""
    with Pair.load(g4_files["target"], None, load_options(n_ctx=512)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        plain = plain_tokens(pair.target, prompt, 24)
        assert pair.target.hidden is None
        pair.set_draft(AssistantModel(g4_files["assistant"], load_options(n_ctx=512), pair.target))
        assert pair.target.hidden is not None
        cfg = GenConfig(max_tokens=24, k=2, proposer="draft")
        assert checked_run(pair.target, prompt, cfg, pair.proposer(cfg))[0] == plain
        pair.set_draft(AssistantModel(g4_files["copy"], load_options(n_ctx=512), pair.target))  # swapped
        pair.target.reset()
        assert pair.target.hidden is not None and checked_run(pair.target, prompt, cfg, pair.proposer(cfg))[0] == plain
        pair.set_draft(None)
        assert pair.target.hidden is None
        pair.set_draft(AssistantModel(g4_files["assistant"], load_options(n_ctx=512), pair.target))
        pair.target.reset()
        assert checked_run(pair.target, prompt, cfg, pair.proposer(cfg))[0] == plain


def test_gemma4_compat_check_names_the_assistant(g4_files):
    from app.models import compat

    v = compat.check_pair(str(g4_files["target"]), str(g4_files["assistant"]), remember=False)
    assert v.ok and "assistant drafter" in v.extra["assistant"] and "mtp" not in v.extra
    backwards = compat.check_pair(str(g4_files["assistant"]), str(g4_files["target"]), remember=False)
    assert not backwards.ok and "runs only as the draft" in backwards.reason
    other = compat.check_pair(str(g4_files["qwen35"]), str(g4_files["assistant"]), remember=False)
    assert not other.ok and "for gemma4 targets, not qwen35" in other.reason
