"""The tree drafter (drafters/tree.py) through the real loop: greedy output equals plain decoding on the demo pair
and on a made-up pair whose draft is often second-best (where branches are taken), the proposer's refusals in one
line, and the target's law kept at T > 0 (χ² of the first two tokens, every rule)."""

from __future__ import annotations

import pytest

from app.engine.decoding.sampling import SamplerSettings
from app.engine.events import DoneEvent, StepEvent
from app.engine.llama.backend import Model
from app.engine.llama.treekv import TreeError
from app.engine.loop import GenConfig, generate, run
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.drafters.tree import TreeProposer
from app.engine.limits import LimitError
from app.engine.decoding.grammar import GrammarSpec
from app.testing import load_options
from support.coupled import parted
from support.greedy import assert_same_greedy
from support.loopchi2 import assert_keeps_law, two_token_law
from support.treepair import made_up_tree_pair
from support.tinyhybrid import write_lfm2

GREEDY = SamplerSettings(temperature=0.0)
STORY = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def made_up(tmp_path_factory, smol_paths):
    """A made-up llama target and a bigram draft of the same vocabulary (its blocks add nothing): the draft's
    runner-up is often the target's choice, so branches are taken."""
    pair = made_up_tree_pair(tmp_path_factory.mktemp("tree"), smol_paths[1])
    yield pair
    pair.close()


def _steps(pair, prompt, cfg) -> tuple[list[int], list[StepEvent], DoneEvent]:
    pair.reset()
    events = list(generate(pair.target, prompt, cfg, pair.proposer(cfg), length=pair.draft_length(cfg)))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return list(done.tokens), [e for e in events if isinstance(e, StepEvent)], done


@pytest.mark.parametrize("k", [4, "auto"])
def test_greedy_tree_output_equals_plain_decoding_on_the_demo_pair(smol_pair, k):
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Write a short poem about the sea and the wind."}])
    smol_pair.reset()
    plain, _ = run(smol_pair.target, prompt, GenConfig(max_tokens=48, sampler=GREEDY, speculative=False))
    tokens, steps, done = _steps(smol_pair, prompt, GenConfig(max_tokens=48, sampler=GREEDY, k=k, proposer="tree"))
    assert_same_greedy(smol_pair, prompt, plain, tokens, f"tree, K={k}")
    assert smol_pair.target.cached == prompt + tokens[:-1] or done.reason != "max_tokens"
    if k == 4:  # a fixed K offers branches where the draft is unsure
        assert done.stats.tree_steps > 0 and done.stats.tree_tokens == sum(s.tree for s in steps)


def test_on_a_made_up_pair_branches_are_taken_and_greedy_output_still_equals_plain(made_up):
    prompt = made_up.target.tokenize(STORY)
    made_up.reset()
    plain, _ = run(made_up.target, prompt, GenConfig(max_tokens=64, sampler=GREEDY, speculative=False))
    tokens, steps, done = _steps(made_up, prompt, GenConfig(max_tokens=64, sampler=GREEDY, k=4, proposer="tree"))
    assert tokens == plain  # (a made-up model's logits are far from near-ties)
    s = done.stats
    assert s.branch_hits > 0 and s.branch_hits == sum(e.branch_hit for e in steps)
    hit = next(e for e in steps if e.branch_hit)
    kept = [n for n in hit.branches if n.kept]
    assert kept and kept[-1].branch and len(kept) == hit.accepted  # the kept path ends on the branch
    assert s.tree_accepted == sum(e.accepted for e in steps if e.tree) and s.mean_path == s.tree_accepted / s.tree_steps
    _, chain_steps, chain = _steps(made_up, prompt, GenConfig(max_tokens=64, sampler=GREEDY, k=4, proposer="draft"))
    assert s.mean_accepted > chain.stats.mean_accepted  # a branch kept is a token more than the chain's pass


def test_a_tree_is_refused_in_one_line_where_it_cannot_run(made_up, tmp_path, smol_paths):
    hybrid = write_lfm2(tmp_path / "hybrid.gguf", smol_paths[1], seed=1)
    with Model(hybrid, load_options(n_ctx=256)) as target:
        cfg = GenConfig(max_tokens=4, sampler=GREEDY, k=2, proposer="tree")
        with pytest.raises(TreeError) as err:
            list(generate(target, target.tokenize(STORY), cfg, TreeProposer(DraftModelProposer(made_up.draft))))
    assert "recurrent/hybrid memory" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(LimitError, match="grammar"):
        GenConfig(proposer="tree", grammar=GrammarSpec.json_object()).validate()


@pytest.fixture(scope="module")
def made_up_fresh(made_up):
    """A second copy of the made-up target: the exact law the χ² tests compare with."""
    with Model(made_up.target.path, load_options(n_ctx=1024)) as m:
        yield m


@pytest.mark.parametrize("rule", ["rejection", "coupled", "match"])
def test_tree_drafts_keep_the_targets_law_at_t1(made_up, made_up_fresh, rule):
    """χ² of the first two tokens at T = 1, top-k 3, K 2 through the real loop, with the branches the made-up
    draft offers at almost every position, each sibling at the first position continued by a tail token; branches
    are taken and their tail tokens judged as the second token (so their judging is what is tested)."""
    seen = _tree_keeps_law(made_up, made_up_fresh, made_up.target.tokenize(STORY), rule, max_tokens=3, draws=1500)
    assert seen["tree"] >= 1500 and seen["hits"] >= 50, seen
    if rule != "match":  # the draft continues its siblings: tail nodes judged as the second token
        assert seen["tails"] >= 30, seen


def _tree_keeps_law(pair, fresh, prompt, rule: str, max_tokens: int, draws: int) -> dict:
    """χ² of the first two tokens at T = 1, top-k 3, K 2 through ``pair``'s loop with tree drafts against the law
    computed from ``fresh``; the branch tokens offered and the branches taken, for the caller to require."""
    fresh.reset()
    law = two_token_law(fresh, prompt, SamplerSettings(temperature=1.0, top_k=3))
    pair.reset()
    seen = {"tree": 0, "hits": 0, "tails": 0}  # tails: tail nodes judged (their parent, a branch node, kept)

    def first_two(seed: int):
        cfg = GenConfig(max_tokens=max_tokens, k=2, proposer="tree", rule=rule,
                        sampler=SamplerSettings(temperature=1.0, top_k=3, seed=seed))
        events = list(generate(pair.target, prompt, cfg, pair.proposer(cfg)))
        steps = [e for e in events if isinstance(e, StepEvent)]
        seen["tree"] += sum(e.tree for e in steps)
        seen["hits"] += sum(e.branch_hit for e in steps)
        seen["tails"] += sum(e.branches[n.parent].kept for e in steps for n in e.branches
                             if n.branch and n.parent >= 0 and e.branches[n.parent].branch)
        assert isinstance(events[-1], DoneEvent)
        return events[-1].tokens

    assert_keeps_law(law, first_two, draws=draws)
    return seen


def test_under_the_coupled_rule_a_seed_gives_the_same_text_with_trees_chains_or_none(made_up):
    """Seeds hold with branches: each position's token is the Gumbel-max draw of the target's p with that
    position's noise, whatever was drafted (decoding/coupled.py, decoding/tree.py)."""
    prompt = made_up.target.tokenize(STORY)
    for seed in (1, 2, 3):
        sampler = SamplerSettings(temperature=1.0, seed=seed)
        texts = []
        for proposer, speculative in (("draft", False), ("draft", True), ("tree", True)):
            made_up.reset()
            cfg = GenConfig(max_tokens=32, k=4, proposer=proposer, rule="coupled", sampler=sampler,
                            speculative=speculative)
            texts.append(run(made_up.target, prompt, cfg, made_up.proposer(cfg))[0])
        for text in texts[1:]:
            assert parted(made_up, prompt, texts[0], text, sampler) is None, seed


@pytest.fixture(scope="module")
def smol_fresh(smol_paths):
    """A second copy of the demo target: the exact law the demo pair's χ² test compares with."""
    with Model(smol_paths[0], load_options(n_ctx=1024)) as m:
        yield m


def test_tree_drafts_keep_the_targets_law_at_t1_on_the_demo_pair(smol_pair, smol_fresh):
    """The same χ² on the real demo pair (rejection sampling). The prompt leaves the draft unsure of the first token
    (top-3 renormalised, its top probability is 0.37), so every draw offers a branch there; the draft is the
    target's own network at another precision, so the target seldom turns its chain token down and takes the
    branch instead (about one draw in twenty; the made-up pair above tests that often)."""
    seen = _tree_keeps_law(smol_pair, smol_fresh, smol_pair.completion_prompt("He picked up the"), "rejection",
                           max_tokens=3, draws=1000)
    assert seen["tree"] >= 1000 and seen["hits"] >= 20, seen  # (2635 branch tokens, 56 hits on this project's CPU)
