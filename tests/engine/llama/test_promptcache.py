"""The prompt cache (promptcache.py): its book-keeping on numbers, then real sequences saved and put back — the demo
target alternating two conversations, a budget that holds one, a budget of 0, a made-up hybrid (LFM2) pair
whose recurrent state, checkpoint and draft come back with the target's cells, and a made-up MTP target whose
NextN rows come back for its head."""

from __future__ import annotations

import pytest

from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.llama.backend import Model
from app.engine.llama.memory import Way
from app.engine.llama.promptcache import (MIB, PromptCache, budget_bytes, choose, evictions, ram_limit, reuse,
                                          state_size, worth_saving)
from app.engine.loop import GenConfig
from app.testing import load_options
from support.greedy import assert_same_greedy, checked_run
from support.tinyhybrid import write_lfm2

PLAIN = GenConfig(max_tokens=16, speculative=False)
BIG = 1 << 40  # "free RAM" for caches whose budget alone must decide


# --- book-keeping -------------------------------------------------------------------------------------------

def test_reuse_counts_what_a_sync_keeps():
    assert reuse(40, 100, recurrent=False) == 40  # a KV cache drops any suffix
    assert reuse(100, 100, recurrent=True) == 100  # the whole sequence is a prefix: nothing to drop
    assert reuse(40, 100, recurrent=True, checkpoint=30) == 30  # back to the checkpoint, the rest read again
    assert reuse(40, 100, recurrent=True, checkpoint=50) == 0  # no checkpoint within: all read again
    assert reuse(40, 100, recurrent=True) == 0
    assert reuse(97, 100, recurrent=True, snapshot=True) == 97  # llama.cpp's in-ubatch snapshots reach


def test_choose_takes_the_entry_that_spares_most_if_it_beats_the_live_one():
    assert choose([10, 50, 30], live=5) == 1
    assert choose([50, 50], live=5) == 1  # equals: the most recent
    assert choose([10, 12], live=10, min_gain=8) is None  # not worth a restore
    assert choose([18], live=10, min_gain=8) == 0
    assert choose([], live=0) is None
    assert choose([0], live=0, min_gain=0) is None  # a restore must spare something


def test_worth_saving_when_a_request_drops_most_of_the_live_sequence():
    assert worth_saving(100, 10) and worth_saving(100, 49)
    assert not worth_saving(100, 50) and not worth_saving(100, 99)  # a chat's next turn keeps nearly all
    assert not worth_saving(4, 0)  # too short to matter


def test_evictions_drop_the_oldest_until_the_new_state_fits():
    assert evictions([10, 20, 30], 5, 100) == 0
    assert evictions([10, 20, 30], 50, 100) == 1
    assert evictions([10, 20, 30], 95, 100) == 3
    assert evictions([10, 20, 30], 101, 100) is None  # larger than the budget: not saved, nothing evicted


def test_budget_never_passes_its_share_of_free_ram():
    assert budget_bytes(None, 64 << 30) == 8192 * MIB  # llama.cpp's default where RAM is plentiful
    assert budget_bytes(None, 4 << 30) == 2 << 30  # half of what is free
    assert budget_bytes(100, BIG) == 100 * MIB and budget_bytes(0, BIG) == 0
    assert ram_limit(1 << 30, held=300 * MIB, available=100 * MIB) == 200 * MIB  # gives way when RAM runs short


# --- real sequences ------------------------------------------------------------------------------------------

def _turn(pair, cache, prompt, cfg=PLAIN, proposer=None, draft=None):
    """One request as the runner makes it: recall, then generate; (output, recall, prompt tokens decoded)."""
    t = pair.target if hasattr(pair, "target") else pair
    got = pair.recall(prompt, cache) if draft is None and hasattr(pair, "recall") else cache.recall(prompt, t, draft)
    before, read = t.decoded, {}
    out, _ = checked_run(t, prompt, cfg, proposer, on_prefill=lambda s: read.setdefault("n", t.decoded - before))
    return out, got, read["n"]


def _conversations(t):
    a = t.tokenize("The history of the lighthouse keepers on the northern islands, told as a long story: " * 4)
    b = t.tokenize("A recipe for bread with rye, seeds and a slow overnight rise, explained step by step: " * 4)
    return a, b


def test_two_conversations_alternate_without_reading_their_prompts_again(smol_pair):
    pair, t = smol_pair, smol_pair.target
    more = t.tokenize(" Go on.", add_special=False)
    runs = {}
    for budget in (64 * MIB, 0):
        pair.reset()
        cache = PromptCache(budget, available=lambda: BIG)
        history = dict(zip("ab", _conversations(t)))
        visits = []  # (prompt, output, recall, prompt tokens read)
        for name in "abab":
            out, got, read = _turn(pair, cache, history[name])
            visits.append((history[name], out, got, read))
            history[name] = history[name] + out + more
        runs[budget] = visits, cache
    visits, cache = runs[64 * MIB]
    assert cache.saves >= 2 and cache.restores == 2
    for prompt, out, got, read in visits[2:]:  # the second visits: the earlier turn comes back, only the new is read
        assert got.restored == got.reused >= len(prompt) - len(more) - 2
        assert read == len(prompt) - 1 - got.reused <= len(more) + 1
    plain, off = runs[0]
    assert off.saves == off.restores == 0 and plain[2][3] > 10 * visits[2][3]  # without it: read again
    for i, ((prompt, out, *_), (_, want, *_)) in enumerate(zip(visits, plain)):
        assert_same_greedy(pair, prompt, want, out, f"visit {i}")
    pair.reset()


def test_a_tiny_budget_evicts_the_least_recently_used(smol_pair):
    pair, t = smol_pair, smol_pair.target
    a, b = _conversations(t)
    c = t.tokenize("Notes on the migration of cranes over the plains in autumn, in detail: " * 4)
    pair.reset()
    probe = PromptCache(64 * MIB, available=lambda: BIG)
    _turn(pair, probe, a)
    one = state_size(t)
    cache = PromptCache(int(one * 1.6), available=lambda: BIG)  # room for one conversation's state, not two
    _turn(pair, cache, b)  # saves a
    assert [e.target.tokens[:len(a) - 1] for e in cache.entries] == [a[:-1]]
    _turn(pair, cache, c)  # saves b: a, the oldest, goes
    assert cache.evicted == 1 and len(cache.entries) == 1 and cache.entries[0].target.tokens[:len(b) - 1] == b[:-1]
    assert cache.size <= cache.budget
    _, got, read = _turn(pair, cache, a + t.tokenize(" Go on.", add_special=False))
    assert got.restored == 0 and read > len(a) // 2  # a was evicted: read again
    pair.reset()


def test_budget_zero_keeps_only_the_live_cache(smol_pair):
    pair, t = smol_pair, smol_pair.target
    a, b = _conversations(t)
    pair.reset()
    cache = PromptCache(0, available=lambda: BIG)
    out, got, read = _turn(pair, cache, a)
    assert got.reused == 0 and read == len(a) - 1
    _, got, _ = _turn(pair, cache, b)
    more = a + out + t.tokenize(" Go on.", add_special=False)
    _, got, read = _turn(pair, cache, more)
    assert cache.entries == [] and cache.saves == cache.restores == 0
    assert got.restored == 0 and read == len(more) - 1 - got.reused  # only the shared start (the BOS) kept
    pair.reset()


def test_a_state_larger_than_the_budget_is_not_saved(smol_pair):
    pair, t = smol_pair, smol_pair.target
    a, b = _conversations(t)
    pair.reset()
    cache = PromptCache(1024, available=lambda: BIG)
    _turn(pair, cache, a)
    _turn(pair, cache, b)
    assert cache.entries == [] and cache.too_big == 1
    pair.reset()


# --- hybrid memory ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("hybrid-cache")
    t = write_lfm2(d / "target.gguf", smol_paths[1], seed=1)
    dr = write_lfm2(d / "draft.gguf", smol_paths[1], seed=2, n_layer=2)
    models = [Model(t, load_options(n_ctx=1024)), Model(dr, load_options(n_ctx=1024)), Model(t, load_options(n_ctx=1024))]
    yield models
    for m in models:
        m.close()


def test_hybrid_state_comes_back_with_its_checkpoint_and_draft(hybrid):
    target, draft, fresh = hybrid
    for m in hybrid:
        m.reset()
    a = target.tokenize("Once upon a time, in a land far away, there was a keeper of bees who " * 3)
    b = target.tokenize("The rain in the valley fell for forty days and the river rose until " * 3)
    cache = PromptCache(64 * MIB, available=lambda: BIG)
    spec = GenConfig(max_tokens=20, k=3)

    def turn(prompt):
        return _turn(target, cache, prompt, spec, DraftModelProposer(draft), draft=draft)

    out_a, _, _ = turn(a)
    turn(b)  # saves a's target and draft sequences
    entry = cache.entries[-1]
    assert entry.target.checkpoint is not None and entry.draft is not None
    before = target.memory_counts()
    more = a + out_a + target.tokenize(" And then", add_special=False)
    out, got, read = turn(more)
    assert got.restored > 0 and read == len(more) - 1 - got.reused  # only the new tokens were read
    assert target.memory_counts()[Way.REPREFILL] == before[Way.REPREFILL]
    assert draft.cached[:len(a) - 1] == a[:-1]  # the draft came back too (it had read a)
    fresh.reset()
    assert out == checked_run(fresh, more, GenConfig(max_tokens=20, speculative=False))[0]

    # a request that rewrites the end of a saved sequence: back to its checkpoint, then the rest is read
    turn(b + target.tokenize(" so", add_special=False))  # saves the extended a
    cut = more + out[:3] + target.tokenize(" but", add_special=False)  # drops most of that reply
    out, got, read = turn(cut)
    assert got.restored > 0 and read == len(cut) - 1 - got.reused
    fresh.reset()
    assert out == checked_run(fresh, cut, GenConfig(max_tokens=20, speculative=False))[0]


def test_an_mtp_targets_rows_come_back_for_its_head(tmp_path, smol_paths):
    """A target with an MTP head (a made-up hybrid Qwen3.5): the NextN rows the head drafts from come back with
    the sequence, so its catch-up after a restore reads the restored conversation's rows."""
    from app.engine.names import ProposerName
    from app.engine.pair import Pair
    from support.tinymtp import write_qwen35_mtp

    path = write_qwen35_mtp(tmp_path / "mtp.gguf", smol_paths[1], seed=1)
    with Pair.load(path, None, load_options(n_ctx=1024)) as pair, Model(path, load_options(n_ctx=1024)) as fresh:
        t = pair.target
        a = t.tokenize("Once upon a time, in a land far away, there was a keeper of bees who " * 3)
        b = t.tokenize("The rain in the valley fell for forty days and the river rose until " * 3)
        cache = PromptCache(64 * MIB, available=lambda: BIG)
        cfg = GenConfig(max_tokens=20, proposer=ProposerName.MTP, k=3)
        out_a, _, _ = _turn(pair, cache, a, cfg, pair.proposer(cfg))
        rows_a = t.hidden.buf[:len(a) - 1].copy()
        _turn(pair, cache, b, cfg, pair.proposer(cfg))
        more = a + out_a + t.tokenize(" And then", add_special=False)
        got = pair.recall(more, cache)
        assert got.restored > 0 and (t.hidden.buf[:len(a) - 1] == rows_a).all()
        out, _ = checked_run(t, more, cfg, pair.proposer(cfg))
        assert out == checked_run(fresh, more, GenConfig(max_tokens=20, speculative=False))[0]
