"""EAGLE-3: a head that drafts from the target's layer-input rows, on a made-up Llama target and made-up ``eagle3``
GGUFs (tests/support/tinyeagle3.py).

Random weights: correctness only (lossless output, the head's cache after rollbacks, the protocol), never quality
or speed. The ``noisy`` head disagrees with its target often (rejections) and depends on the target's rows, its
own cache and the positions; the ``copy`` head predicts exactly what its bigram target will (every draft
accepted). Both borrow the target's token embeddings and output matrix (``ctx_other``) unless written with their
own.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.errors import TandemError
from app.engine.llama.backend import Model
from app.engine.llama.eagle3rows import LayerRows
from app.engine.loop import GenConfig
from app.engine.drafters.eagle3 import Eagle3Error, Eagle3Model, is_eagle3
from app.engine.drafters.mtp import MtpProposer
from app.engine.pair import Pair
from app.testing import load_options
from support.greedy import checked_run
from support.loopchi2 import assert_pair_keeps_law
from support.mtpcheck import RecordingMtp, plain_tokens
from support.tinyeagle3 import LAYERS, N_EMBD, write_eagle3, write_llama
from support.tinymtp import write_qwen35_mtp

PROMPT = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def e3_files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("eagle3")
    vocab = smol_paths[1]
    return {
        "target": write_llama(d / "target.gguf", vocab, seed=1),
        "head": write_eagle3(d / "head.gguf", vocab, seed=1),
        "bigram": write_llama(d / "bigram.gguf", vocab, seed=2, trunk=0.0),
        "copy": write_eagle3(d / "copy.gguf", vocab, seed=2, noise=0.0),
        "copy_own": write_eagle3(d / "copy-own.gguf", vocab, seed=3, noise=0.0, own_vocab=True),
        "deep": write_eagle3(d / "deep.gguf", vocab, seed=1, layers=(0, 2, 4)),
        "wide": write_eagle3(d / "wide.gguf", vocab, seed=1, target_hidden=2 * N_EMBD),
        "qwen35_head": write_eagle3(d / "qwen35-head.gguf", vocab, seed=1, layers=(0, 1, 1)),
        "qwen35": write_qwen35_mtp(d / "qwen35.gguf", vocab, seed=1),
    }


@pytest.fixture(scope="module")
def e3_pair(e3_files):
    pair = Pair.load(e3_files["target"], e3_files["head"], load_options(n_ctx=1024))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def e3_fresh(e3_files):
    """A second copy of the target: plain references and the protocol's reference drafts."""
    with Model(e3_files["target"], load_options(n_ctx=1024)) as m:
        yield m


def test_eagle3_head_loads_as_the_draft(e3_pair, e3_files):
    assert is_eagle3(e3_files["head"]) and not is_eagle3(e3_files["target"])
    assert isinstance(e3_pair.draft, Eagle3Model) and e3_pair.draft_kind == "EAGLE-3 head"
    assert e3_pair.kv_share is None and "EAGLE-3" in e3_pair.kv_share_reason
    rows = e3_pair.target.hidden
    assert isinstance(rows, LayerRows) and rows.layers == LAYERS and rows.n_embd == 3 * N_EMBD
    assert not e3_pair.has_mtp
    assert isinstance(e3_pair.proposer(GenConfig(proposer="draft", k=2)), MtpProposer)


def test_eagle3_rows_are_the_target_layer_inputs(e3_files):
    """A bigram target's blocks add nothing, so the input of every layer at position p is the embedding of x_p:
    the recorded row is that embedding three times, in the order the tokens were decoded."""
    import gguf

    embd = next(t for t in gguf.GGUFReader(str(e3_files["bigram"])).tensors if t.name == "token_embd.weight")
    table = np.asarray(embd.data, dtype=np.float32).reshape(-1, N_EMBD)
    with Pair.load(e3_files["bigram"], e3_files["copy"], load_options(n_ctx=256)) as pair:
        tokens = pair.target.tokenize(PROMPT)
        pair.target.sync(tokens[:5], need_logits=False)
        pair.target.decode(tokens[5:])  # a second batch lands after the first
        for p, x in enumerate(tokens):
            np.testing.assert_allclose(pair.target.hidden.row(p), np.tile(table[x], 3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k,proposer", [(1, "draft"), (3, "draft"), ("auto", "draft"), ("auto", "auto")])
def test_eagle3_greedy_speculative_equals_plain_with_rejections(e3_pair, e3_fresh, k, proposer):
    prompt = e3_pair.target.tokenize(PROMPT)
    plain = plain_tokens(e3_fresh, prompt, 60)
    e3_pair.reset()
    cfg = GenConfig(max_tokens=60, k=k, proposer=proposer)
    out, stats = checked_run(e3_pair.target, prompt, cfg, e3_pair.proposer(cfg), length=e3_pair.draft_length(cfg))
    assert out == plain
    if k != "auto":  # auto K may rightly pause on this made-up pair; fixed K must draft and be rejected
        assert stats.drafted > 0 and stats.rejections > 0 and stats.accepted > 0
    assert e3_pair.target.n_past == len(prompt) + len(out) - 1


def test_eagle3_drafts_equal_a_fresh_target_and_head(e3_pair, e3_fresh, e3_files):
    """Rollback: after rejections the head's cache holds exactly the entries a fresh head would write for the
    history at once (its drafted entries dropped, the target's rows re-read), so each draft equals a fresh head's
    on a fresh target. The noisy head attends to its cache and reads ``g``, so a stale entry, a wrong row or a
    wrong position would change the drafts."""
    prompt = e3_pair.target.tokenize(PROMPT)
    e3_pair.reset()
    rec = RecordingMtp(e3_pair.draft)
    _, stats = checked_run(e3_pair.target, prompt, GenConfig(max_tokens=50, k=3, proposer="draft"), rec)
    assert stats.rejections > 3
    checked = 0
    with Eagle3Model(e3_files["head"], load_options(n_ctx=1024), e3_fresh) as ref:
        for history, drafted in rec.calls[::3]:
            e3_fresh.reset()
            e3_fresh.sync(history[:-1], need_logits=False)
            ref.reset()
            logits = ref.sync(history)
            for d in drafted:
                assert int(np.argmax(logits)) == d
                logits = ref.decode([d])[0]
            checked += len(drafted)
    assert checked > 5 and e3_fresh.hidden is None  # closing the head turned the rows it asked for off


def test_eagle3_head_trusts_no_entry_of_a_sequence_put_in_from_outside(e3_pair):
    """A saved prompt state put back (promptcache.py assigns ``cached``) may hold drafted entries: the head then
    reads the whole history again from the target's rows, and drafts as it did."""
    head, target = e3_pair.draft, e3_pair.target
    e3_pair.reset()
    prompt = target.tokenize(PROMPT)
    cfg = GenConfig(max_tokens=12, k=3, proposer="draft")
    out, _ = checked_run(target, prompt, cfg, e3_pair.proposer(cfg))
    history = prompt + out[:-1]
    target.rollback(len(history) - 1)
    before = head.sync(history)
    assert head.missing(history) == 0 < head.n_clean
    head.cached = list(head.cached)
    assert head.n_clean == 0 and head.missing(history) == len(history)
    np.testing.assert_allclose(head.sync(history), before, rtol=1e-3, atol=1e-3)


def test_eagle3_prompt_cache_puts_back_the_rows_and_the_head_reads_them(e3_pair, e3_fresh):
    """Two conversations alternate with the prompt cache on (promptcache.py): the target's layer rows come back with
    its cells, the head's saved sequence comes back untrusted (it reads the restored rows again), and the output
    is the target's."""
    from app.engine.llama.promptcache import MIB, PromptCache

    t = e3_pair.target
    e3_pair.reset()
    cache = PromptCache(64 * MIB, available=lambda: 1 << 40)
    cfg = GenConfig(max_tokens=20, k=3, proposer="draft")
    a = t.tokenize("Once upon a time, in a land far away, there was a keeper of bees who " * 3)
    b = t.tokenize("The rain in the valley fell for forty days and the river rose until " * 3)
    e3_pair.recall(a, cache)
    out_a, _ = checked_run(t, a, cfg, e3_pair.proposer(cfg))
    rows_a = t.hidden.buf[:len(a) - 1].copy()
    e3_pair.recall(b, cache)
    checked_run(t, b, cfg, e3_pair.proposer(cfg))
    more = a + out_a + t.tokenize(" And then", add_special=False)
    got = e3_pair.recall(more, cache)
    assert got.restored > 0 and (t.hidden.buf[:len(a) - 1] == rows_a).all()
    assert e3_pair.draft.n_clean == 0
    out, _ = checked_run(t, more, cfg, e3_pair.proposer(cfg))
    assert out == plain_tokens(e3_fresh, more, 20)


@pytest.mark.parametrize("head", ["copy", "copy_own"])
def test_eagle3_copy_head_accepts_everything(e3_files, head):
    """The copy head (tests/support/tinyeagle3.py, ``write_eagle3`` at noise 0) is built so that its logits are
    its bigram target's: the target's blocks add nothing (its logits after ``x`` are ``W_out · rmsnorm(e(x))``),
    and the head's one attention head matches a token only with entries of the same token, on the dimensions RoPE
    leaves alone, whose values are that token's normed embedding, while ``g`` is normed to zero and its FFN adds
    nothing: its output row is ``rmsnorm(e(x))`` and, through the target's own (borrowed, or copied) output
    matrix, its logits the target's. So every draft is accepted, and the tokens, rows and positions are paired as
    llama.cpp's driver pairs them (a token paired with the wrong position's entry would draft the wrong token)."""
    with Pair.load(e3_files["bigram"], e3_files[head], load_options(n_ctx=512)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        plain = plain_tokens(pair.target, prompt, 40)
        pair.reset()
        cfg = GenConfig(max_tokens=40, k=4, proposer="draft")
        out, stats = checked_run(pair.target, prompt, cfg, pair.proposer(cfg))
        assert out == plain and stats.rejections == 0 and stats.acceptance_rate == 1.0 and stats.drafted > 20


def test_eagle3_chat_prefix_reuse(e3_pair, e3_fresh):
    """Turn 2 extends turn 1: the target and the head keep what they hold and read only the new turn; a turn that
    rewrites the end is rolled back in both. Either way the output equals a fresh model's."""
    target, head = e3_pair.target, e3_pair.draft
    e3_pair.reset()
    cfg = GenConfig(max_tokens=30, k=3, proposer="draft")
    turn1 = target.tokenize(PROMPT)
    out1, _ = checked_run(target, turn1, cfg, e3_pair.proposer(cfg))
    turn2 = turn1 + out1 + target.tokenize(" And then", add_special=False)
    held = target.n_past
    assert target.missing(turn2[:-1]) == len(turn2) - 1 - held  # the first turn is still cached
    assert head.missing(turn2) <= len(turn2) - len(turn1)  # … and the head's entries for it
    out2, _ = checked_run(target, turn2, cfg, e3_pair.proposer(cfg))
    assert out2 == plain_tokens(e3_fresh, turn2, 30)
    rewritten = turn2 + out2[:5] + target.tokenize(" but", add_special=False)
    out3, _ = checked_run(target, rewritten, cfg, e3_pair.proposer(cfg))
    assert out3 == plain_tokens(e3_fresh, rewritten, 30)


def test_eagle3_sampling_keeps_the_target_distribution(e3_pair, e3_fresh):
    """χ² on the joint law of the first two tokens at T = 1, top-k 3, through the real loop with rejection
    sampling against the head's own q (rejected tokens are rolled back in between)."""
    assert_pair_keeps_law(e3_pair, e3_fresh, e3_pair.target.tokenize(PROMPT), "draft")


def test_eagle3_refuses_a_target_that_records_no_layer_rows(e3_files, gemma_paths):
    """A Gemma-3 target's graph hands llama.cpp no layer inputs (turned on, its first decode would stop the
    process: tests/engine/llama/test_eagle3rows.py): refused in one line before anything is turned on, and
    nothing stays loaded."""
    with pytest.raises(Eagle3Error) as err:
        Pair.load(gemma_paths[0], e3_files["head"], load_options(n_ctx=256))
    assert isinstance(err.value, TandemError) and "\n" not in str(err.value)
    assert "does not record the layer inputs of gemma3 targets" in str(err.value)


@pytest.mark.parametrize("head,why", [
    ("deep", "it reads layer 4, but the target has layers 0-3"),
    ("wide", "it reads rows 128 wide but the target's are 64"),
])
def test_eagle3_refuses_a_head_made_for_another_model(e3_files, head, why):
    with pytest.raises(Eagle3Error, match=why):
        Pair.load(e3_files["target"], e3_files[head], load_options(n_ctx=256))


def test_eagle3_refused_beside_an_mtp_head_and_turned_off_when_unloaded(e3_files):
    """The target keeps one kind of rows: an EAGLE-3 head is refused beside the MTP rows a target keeps for its
    own head (loaded without them, it is accepted); unloading the head turns its rows off."""
    with pytest.raises(Eagle3Error, match="keeps other rows"):
        Pair.load(e3_files["qwen35"], e3_files["qwen35_head"], load_options(n_ctx=256))
    with Pair.load(e3_files["qwen35"], e3_files["qwen35_head"], load_options(n_ctx=256, load_mtp=False)) as hybrid:
        prompt = hybrid.target.tokenize(PROMPT)  # a hybrid target: its rollbacks go through state snapshots
        plain = plain_tokens(hybrid.target, prompt, 24)
        hybrid.reset()
        cfg = GenConfig(max_tokens=24, k=3, proposer="draft")
        out, stats = checked_run(hybrid.target, prompt, cfg, hybrid.proposer(cfg))
        assert out == plain and stats.drafted > 0
    with Pair.load(e3_files["target"], e3_files["head"], load_options(n_ctx=256)) as pair:
        assert isinstance(pair.target.hidden, LayerRows)
        pair.set_draft(None)
        assert pair.target.hidden is None
        prompt = pair.target.tokenize(PROMPT)
        assert checked_run(pair.target, prompt, GenConfig(max_tokens=8, speculative=False))[0]
