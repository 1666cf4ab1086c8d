"""The draft model takes the target's KV cache (kvshare.py) where both are one network at two precisions (the
demo pair): it then reads only what the target has not, the greedy output still equals plain decoding, a pair
of different networks never shares, and a copy llama.cpp refuses leaves a draft model that reads for itself."""

from __future__ import annotations

import numpy as np

from app.engine.llama.backend import LoadOptions, Model
from app.engine.drafters.kvshare import READ_PRIOR, KvShare, share_reason
from app.engine.loop import GenConfig
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.decoding.sampling import SamplerSettings
from app.lab.prompts import builtin_suite

from support.greedy import assert_same_greedy, checked_run

GREEDY = SamplerSettings()


def test_the_demo_pair_shares_and_the_draft_model_reads_only_what_the_target_has_not(smol_pair):
    assert smol_pair.kv_share is not None and share_reason(smol_pair.target, smol_pair.draft) is None
    smol_pair.reset()
    share = KvShare(smol_pair.target, smol_pair.draft)
    prompt = builtin_suite("edit")[0].tokens(smol_pair)
    smol_pair.target.sync(prompt[:-1], need_logits=False)
    proposer = DraftModelProposer(smol_pair.draft, share=share)
    proposer.begin(prompt)  # the prompt: a copy instead of a prefill
    assert share.pulls == 1 and share.saved == len(prompt) - 1
    assert smol_pair.draft.cached == list(prompt[:-1])
    draft = proposer.propose(list(prompt), 4, GREEDY, np.random.default_rng(0), False)
    assert draft.synced == 1 and len(draft.tokens) == 4
    # the target keeps all four and a token of its own, as a verify pass leaves it: the history less its last
    kept = draft.tokens + [draft.tokens[0]]
    smol_pair.target.sync(list(prompt) + kept[:-1], need_logits=False)
    again = proposer.propose(list(prompt) + kept, 4, GREEDY, np.random.default_rng(0), False)
    assert share.pulls == 2 and again.synced == 2  # two new tokens for the draft, one of them copied
    assert smol_pair.draft.cached[:len(prompt) + 5] == list(prompt) + kept


def test_greedy_output_with_the_shared_cache_equals_plain(smol_pair):
    share = smol_pair.kv_share
    before = share.pulls
    for prompt in [p for p in builtin_suite("edit,code") if p.id in ("edit-rename", "edit-class", "code-fib")]:
        tokens = prompt.tokens(smol_pair)
        smol_pair.reset()
        plain, _ = checked_run(smol_pair.target, tokens, GenConfig(max_tokens=64, speculative=False))
        for proposer in ("auto", "draft"):
            cfg = GenConfig(max_tokens=64, proposer=proposer)
            smol_pair.reset()
            spec, _ = checked_run(smol_pair.target, tokens, cfg, smol_pair.proposer(cfg), length=smol_pair.draft_length(cfg))
            assert_same_greedy(smol_pair, tokens, plain, spec, f"{prompt.id}: {proposer} with a shared cache")
    assert share.pulls > before and share.refused is None


def test_different_networks_never_share_and_a_refused_copy_leaves_a_draft_that_reads(smol_pair, gemma_paths):
    other = Model(gemma_paths[1], LoadOptions(n_ctx=512, n_threads=smol_pair.target.n_threads))
    try:
        assert share_reason(smol_pair.target, other) == "the two are different networks"
        smol_pair.reset()
        smol_pair.target.sync(smol_pair.target.tokenize("def add(a, b):\n    return a + b\n"), need_logits=False)
        other.sync(other.tokenize("Hello there"), need_logits=False)
        forced = KvShare(smol_pair.target, other)  # what llama.cpp does when the layouts differ
        assert not forced.pull()
        assert forced.refused and "refused" in forced.refused
        assert other.cached == [] and other.n_past == 0
        assert not forced.worth(100, 10)  # never tried again
        logits = other.sync(other.tokenize("Hello there"))  # and it reads for itself
        assert logits is not None and other.n_past > 0
    finally:
        other.close()


def test_a_copy_is_taken_only_where_it_costs_less_than_the_reading_it_saves():
    share = KvShare.__new__(KvShare)
    KvShare.__init__(share, None, None)  # (no models: the arithmetic alone)
    assert share.worth(1, 10_000)  # nothing timed yet: try it, and time it
    assert not share.worth(0, 10)  # nothing to save
    share.copy_s.extend([5e-6] * 3)  # 5 µs a cached token
    share.step_s.extend([0.009] * 3)  # 9 ms to read one token alone: one of a batch is priced at half of it
    assert share.worth(1, 500)  # 2.5 ms to copy against 4.5 ms to read one
    assert not share.worth(1, 2000)  # 10 ms against 4.5
    assert share.worth(3, 2000)  # against 13.5
    share.read_s.extend([0.002] * 3)  # batched reading was timed: 2 ms a token
    assert not share.worth(3, 2000) and share.worth(3, 1000)
    assert 0 < READ_PRIOR < 1
