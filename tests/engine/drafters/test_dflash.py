"""DFlash and DSpark: block drafters that draft from the target's layer-input rows in one non-causal pass, on a
made-up Llama target and made-up ``dflash`` GGUFs (tests/support/tinydflash.py).

Random weights: correctness only (lossless output, the drafter's cache after rollbacks, the protocol), never
quality or speed. The ``noisy`` drafters disagree with their target often (rejections) and depend on the target's
rows, the positions and the block; the ``copy`` drafters predict exactly what their bigram target will (every
draft accepted). All borrow the target's token embeddings and output matrix (``ctx_other``).
"""

from __future__ import annotations

import llama_cpp as L
import numpy as np
import pytest

from app.engine.drafters.dflash import (DFlashError, DFlashModel, DFlashProposer, drafter_refusal, is_dflash,
                                        tensor_names)
from app.engine.errors import TandemError
from app.engine.llama.backend import Model
from app.engine.llama.eagle3rows import LayerRows
from app.engine.loop import GenConfig
from app.engine.pair import Pair
from app.testing import load_options
from support.greedy import checked_run
from support.loopchi2 import assert_pair_keeps_law
from support.mtpcheck import plain_tokens
from support.tinydflash import LAYERS, N_EMBD, write_dflash, write_target
from support.tinymtp import write_qwen35_mtp

PROMPT = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def df_files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("dflash")
    vocab = smol_paths[1]
    return {
        "target": write_target(d / "target.gguf", vocab, seed=1),
        "head": write_dflash(d / "head.gguf", vocab, seed=1),
        "spark": write_dflash(d / "spark.gguf", vocab, seed=3, dspark=True),
        "bigram": write_target(d / "bigram.gguf", vocab, seed=2, trunk=0.0),
        "copy": write_dflash(d / "copy.gguf", vocab, seed=2, noise=0.0, block=2),
        "spark_copy": write_dflash(d / "spark-copy.gguf", vocab, seed=2, noise=0.0, dspark=True),
        "deep": write_dflash(d / "deep.gguf", vocab, seed=1, layers=(0, 2, 4)),
        "wide": write_dflash(d / "wide.gguf", vocab, seed=1, n_embd=2 * N_EMBD),
        "no_mask": write_dflash(d / "no-mask.gguf", vocab, seed=1, mask=False),
        "spark_no_block": write_dflash(d / "spark-no-block.gguf", vocab, seed=1, dspark=True, block=None),
        "dflash2": write_dflash(d / "dflash2.gguf", vocab, seed=1, selector_rank=8),
        "qwen35": write_qwen35_mtp(d / "qwen35.gguf", vocab, seed=1),
        "qwen35_head": write_dflash(d / "qwen35-head.gguf", vocab, seed=1, layers=(0, 1)),
    }


@pytest.fixture(scope="module")
def df_pair(df_files):
    pair = Pair.load(df_files["target"], df_files["head"], load_options(n_ctx=1024))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def df_fresh(df_files):
    """A second copy of the target: plain references and the protocol's reference drafts."""
    with Model(df_files["target"], load_options(n_ctx=1024)) as m:
        yield m


class RecordingDFlash(DFlashProposer):
    """A ``DFlashProposer`` that keeps (history, drafted tokens) for every call."""

    def __init__(self, model):
        super().__init__(model)
        self.calls: list[tuple[list[int], list[int]]] = []

    def propose(self, history, k, sampler, rng, sample, noise=None, **kw):
        draft = super().propose(history, k, sampler, rng, sample, noise, **kw)
        self.calls.append((list(history), list(draft.tokens)))
        return draft


def test_dflash_drafter_loads_as_the_draft(df_pair, df_files):
    assert is_dflash(df_files["head"]) and not is_dflash(df_files["target"])
    assert "markov_w1.weight" in tensor_names(df_files["spark"]) and "fc.weight" in tensor_names(df_files["head"])
    assert isinstance(df_pair.draft, DFlashModel) and df_pair.draft_kind == "DFlash block"
    assert df_pair.kv_share is None and "DFlash" in df_pair.kv_share_reason
    rows = df_pair.target.hidden
    assert isinstance(rows, LayerRows) and rows.layers == LAYERS and rows.n_embd == len(LAYERS) * N_EMBD
    head = df_pair.draft
    assert (head.variant, head.block, head.max_draft) == ("DFlash", 4, 3)  # [x, MASK × 3]: slots 1-3
    assert isinstance(df_pair.proposer(GenConfig(proposer="draft", k=2)), DFlashProposer)
    with Pair.load(df_files["target"], df_files["spark"], load_options(n_ctx=256)) as spark:
        assert spark.draft_kind == "DFlash block"
        assert (spark.draft.variant, spark.draft.max_draft) == ("DSpark", 4)  # read from the anchor: slots 0-3


@pytest.mark.parametrize("k,proposer", [(1, "draft"), (3, "draft"), (8, "draft"), ("auto", "draft"),
                                        ("auto", "auto")])
def test_dflash_greedy_speculative_equals_plain_with_rejections(df_pair, df_fresh, k, proposer):
    """K 8 asks for more than a block holds: each step drafts at most B - 1 = 3."""
    prompt = df_pair.target.tokenize(PROMPT)
    plain = plain_tokens(df_fresh, prompt, 60)
    df_pair.reset()
    cfg = GenConfig(max_tokens=60, k=k, proposer=proposer)
    fixed = k != "auto"
    spec = RecordingDFlash(df_pair.draft) if fixed else df_pair.proposer(cfg)
    out, stats = checked_run(df_pair.target, prompt, cfg, spec, length=df_pair.draft_length(cfg))
    assert out == plain
    if fixed:  # auto K may rightly pause on this made-up pair; fixed K must draft and be rejected
        assert stats.drafted > 0 and stats.rejections > 0 and stats.accepted > 0
        assert max(len(d) for _, d in spec.calls) == min(k, 3)
    assert df_pair.target.n_past == len(prompt) + len(out) - 1


def test_dspark_greedy_speculative_equals_plain_with_rejections(df_files, df_fresh):
    with Pair.load(df_files["target"], df_files["spark"], load_options(n_ctx=1024)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        plain = plain_tokens(df_fresh, prompt, 60)
        pair.reset()
        cfg = GenConfig(max_tokens=60, k=4, proposer="draft")
        out, stats = checked_run(pair.target, prompt, cfg, pair.proposer(cfg))
        assert out == plain and stats.drafted > 0 and stats.rejections > 0 and stats.accepted > 0


def test_dflash_drafts_equal_a_fresh_target_and_drafter(df_pair, df_fresh, df_files):
    """Rollback: after rejections the drafter's cache holds exactly the target's features for the history (the
    block removed after every draft, the features of rejected positions dropped and written again), so each draft
    equals a fresh drafter's on a fresh target. The noisy drafter attends to every cached feature and to the block,
    so a stale entry, a block left behind, a wrong row or a wrong position would change the drafts."""
    prompt = df_pair.target.tokenize(PROMPT)
    df_pair.reset()
    rec = RecordingDFlash(df_pair.draft)
    _, stats = checked_run(df_pair.target, prompt, GenConfig(max_tokens=50, k=3, proposer="draft"), rec)
    assert stats.rejections > 3
    head = df_pair.draft  # the block never stays: the cache ends at the last feature written
    assert L.llama_memory_seq_pos_max(head.mem, 0) == len(head.cached) - 1
    checked = 0
    with DFlashModel(df_files["head"], load_options(n_ctx=1024), df_fresh) as ref:
        for history, drafted in rec.calls[::3]:
            df_fresh.reset()
            df_fresh.sync(history[:-1], need_logits=False)
            ref.reset()
            logits = ref.sync(history)
            for i, d in enumerate(drafted):
                assert int(np.argmax(logits)) == d
                if i + 1 < len(drafted):
                    logits = ref.decode([d])[0]
            checked += len(drafted)
    assert checked > 5 and df_fresh.hidden is None  # closing the drafter turned the rows it asked for off


@pytest.mark.parametrize("head,k", [("copy", 1), ("spark_copy", 4)])
def test_dflash_copy_drafter_accepts_everything(df_files, head, k):
    """The copy drafters (tests/support/tinydflash.py, noise 0) are built so that their drafts are their bigram
    target's greedy tokens: the DFlash one's mask slot attends only to the block's anchor (the history's last
    token, at its position) and outputs its bigram logits (one draft a block of 2); the DSpark one's anchor slot
    does so and its Markov head adds the bigram's logits along the chain (four drafts a block of 4). So every
    draft is accepted, and the anchor, the mask token, the slots read and the positions are as llama.cpp's driver
    lays them out (an anchor off by one, or the wrong slots read, would draft the wrong tokens)."""
    with Pair.load(df_files["bigram"], df_files[head], load_options(n_ctx=512)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        plain = plain_tokens(pair.target, prompt, 40)
        pair.reset()
        cfg = GenConfig(max_tokens=40, k=k, proposer="draft")
        out, stats = checked_run(pair.target, prompt, cfg, pair.proposer(cfg))
        assert out == plain and stats.rejections == 0 and stats.acceptance_rate == 1.0 and stats.drafted >= 20


def test_dflash_chat_prefix_reuse(df_pair, df_fresh):
    """Turn 2 extends turn 1: the target and the drafter keep what they hold and read only the new turn; a turn
    that rewrites the end is rolled back in both. Either way the output equals a fresh model's."""
    target, head = df_pair.target, df_pair.draft
    df_pair.reset()
    cfg = GenConfig(max_tokens=30, k=3, proposer="draft")
    turn1 = target.tokenize(PROMPT)
    out1, _ = checked_run(target, turn1, cfg, df_pair.proposer(cfg))
    turn2 = turn1 + out1 + target.tokenize(" And then", add_special=False)
    held = target.n_past
    assert target.missing(turn2[:-1]) == len(turn2) - 1 - held  # the first turn is still cached
    assert head.missing(turn2) <= len(turn2) - len(turn1)  # … and the drafter's features of it
    out2, _ = checked_run(target, turn2, cfg, df_pair.proposer(cfg))
    assert out2 == plain_tokens(df_fresh, turn2, 30)
    rewritten = turn2 + out2[:5] + target.tokenize(" but", add_special=False)
    out3, _ = checked_run(target, rewritten, cfg, df_pair.proposer(cfg))
    assert out3 == plain_tokens(df_fresh, rewritten, 30)


def test_dflash_prompt_cache_puts_back_the_rows_and_the_features(df_pair, df_fresh):
    """Two conversations alternate with the prompt cache on (promptcache.py): the target's layer rows come back
    with its cells, the drafter's features with its own, and the output is the target's."""
    from app.engine.llama.promptcache import MIB, PromptCache

    t = df_pair.target
    df_pair.reset()
    cache = PromptCache(64 * MIB, available=lambda: 1 << 40)
    cfg = GenConfig(max_tokens=20, k=3, proposer="draft")
    a = t.tokenize("Once upon a time, in a land far away, there was a keeper of bees who " * 3)
    b = t.tokenize("The rain in the valley fell for forty days and the river rose until " * 3)
    df_pair.recall(a, cache)
    out_a, _ = checked_run(t, a, cfg, df_pair.proposer(cfg))
    df_pair.recall(b, cache)
    checked_run(t, b, cfg, df_pair.proposer(cfg))
    more = a + out_a + t.tokenize(" And then", add_special=False)
    got = df_pair.recall(more, cache)
    assert got.restored > 0
    out, _ = checked_run(t, more, cfg, df_pair.proposer(cfg))
    assert out == plain_tokens(df_fresh, more, 20)


def test_dflash_sampling_keeps_the_target_distribution(df_pair, df_fresh):
    """χ² on the joint law of the first two tokens at T = 1, top-k 3, through the real loop with rejection
    sampling against each slot's own q (rejected tokens are rolled back in between)."""
    assert_pair_keeps_law(df_pair, df_fresh, df_pair.target.tokenize(PROMPT), "draft")


def test_dspark_sampling_keeps_the_target_distribution(df_files, df_fresh):
    """The same for DSpark: its slots follow the Markov head's greedy chain, not the tokens drawn, and each is a
    distribution of the context alone, so drawing from it and judging against it keeps the target's law."""
    with Pair.load(df_files["target"], df_files["spark"], load_options(n_ctx=1024)) as pair:
        assert_pair_keeps_law(pair, df_fresh, pair.target.tokenize(PROMPT), "draft")


def test_dflash_refuses_a_target_that_records_no_layer_rows(df_files, gemma_paths):
    """A Gemma-3 target's graph hands llama.cpp no layer inputs (turned on, its first decode would stop the
    process: tests/engine/llama/test_eagle3rows.py): refused in one line before anything is turned on, and
    nothing stays loaded."""
    with pytest.raises(DFlashError) as err:
        Pair.load(gemma_paths[0], df_files["head"], load_options(n_ctx=256))
    assert isinstance(err.value, TandemError) and "\n" not in str(err.value)
    assert "does not record the layer inputs of gemma3 targets, which a DFlash drafter reads" in str(err.value)


@pytest.mark.parametrize("head,why", [
    ("deep", "it reads layer 4, but the target has layers 0-3"),
    ("wide", "it reads rows 128 wide but the target's are 64"),
    ("no_mask", "it names no mask token"),
    ("spark_no_block", "a DSpark drafter without dflash.block_size"),
    ("dflash2", "a DFlash2 drafter"),
])
def test_dflash_refuses_a_drafter_it_cannot_run(df_files, head, why):
    with pytest.raises(DFlashError, match=why) as err:
        Pair.load(df_files["target"], df_files[head], load_options(n_ctx=256))
    assert "\n" not in str(err.value)


def test_dflash_unloaded_turns_the_rows_off(df_files):
    with Pair.load(df_files["target"], df_files["head"], load_options(n_ctx=256)) as pair:
        assert isinstance(pair.target.hidden, LayerRows)
        pair.set_draft(None)
        assert pair.target.hidden is None
        prompt = pair.target.tokenize(PROMPT)
        assert checked_run(pair.target, prompt, GenConfig(max_tokens=8, speculative=False))[0]


def test_dflash_drafter_refusal_reads_header_figures_alone():
    """The drafter's own refusals need nothing but its header (what ``models check`` reads): the same words as
    loading gives."""
    assert drafter_refusal(16, 5, 100) is None and drafter_refusal(None, 5, 100) is None  # (16, llama.cpp's)
    assert "a DFlash2 drafter" in drafter_refusal(16, 5, 100, selector_rank=8)
    assert "a DSpark drafter without dflash.block_size" in drafter_refusal(None, 5, 100, dspark=True)
    assert drafter_refusal(4, 5, 100, dspark=True) is None
    assert all("no mask token" in drafter_refusal(16, m, 100) for m in (None, -1, 100))
    assert "block size (1) is outside 2-256" in drafter_refusal(1, 5, 100)


def test_dflash_refused_beside_mtp_rows_and_drafts_for_a_hybrid_target(df_files):
    """The target keeps one kind of rows: a DFlash drafter is refused beside the MTP rows a target keeps for its
    own head; loaded without them, a hybrid target (its rollbacks go through state snapshots) gets the drafter,
    and the output is its own."""
    with pytest.raises(DFlashError, match="keeps other rows"):
        Pair.load(df_files["qwen35"], df_files["qwen35_head"], load_options(n_ctx=256))
    with Pair.load(df_files["qwen35"], df_files["qwen35_head"], load_options(n_ctx=256, load_mtp=False)) as hybrid:
        prompt = hybrid.target.tokenize(PROMPT)
        plain = plain_tokens(hybrid.target, prompt, 24)
        hybrid.reset()
        cfg = GenConfig(max_tokens=24, k=3, proposer="draft")
        out, stats = checked_run(hybrid.target, prompt, cfg, hybrid.proposer(cfg))
        assert out == plain and stats.drafted > 0


def test_dflash_times_a_block_and_leaves_its_cache(df_pair):
    """Auto K re-measures a paused drafter's cost without drafting (``time_tokens``): one block's time whatever K,
    the cache as it was (the target's features, no block)."""
    target, head = df_pair.target, df_pair.draft
    df_pair.reset()
    prompt = target.tokenize(PROMPT)
    target.sync(prompt[:-1], need_logits=False)
    head.sync(prompt[:-1], need_logits=False)
    before = (list(head.cached), L.llama_memory_seq_pos_max(head.mem, 0))
    assert before[1] == len(prompt) - 2
    spec = df_pair.proposer(GenConfig(proposer="draft", k=3))
    assert spec.time_tokens(prompt, 3) > 0 and spec.time_tokens(prompt, 0) == 0.0
    assert (list(head.cached), L.llama_memory_seq_pos_max(head.mem, 0)) == before
