"""Token trees (decoding/tree.py): the walk by the target's draws, recursive rejection sampling's exactness over
siblings drawn without replacement (χ² on synthetic distributions), siblings' tails, and the reports a step gives."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.decoding.coupled import GumbelNoise
from app.engine.decoding.sampling import SamplerSettings
from app.engine.decoding.tree import (ROOT, Sibling, Tree, TreeStep, Walk, chain_tree, cut_siblings, judge_tree,
                                      node_probs, recursive_rejection_sample, walk_by_draw, without)
from app.engine.decoding.verify import sample_from
from app.engine.names import Rule

V = 5
CHI2_CRIT = {3: 16.266, 15: 37.697}  # significance 0.001, by degrees of freedom


def _p(context: tuple) -> np.ndarray:
    """A made-up target: its distribution after ``context`` (deterministic, uneven, some zeros)."""
    rng = np.random.default_rng(hash(context) % (2 ** 32))
    w = rng.random(V) ** 2
    w[rng.integers(V)] = 0.0
    return w / w.sum()


def _q(context: tuple) -> np.ndarray:
    """A made-up draft that disagrees with the target."""
    rng = np.random.default_rng((hash(context) + 17) % (2 ** 32))
    w = rng.random(V) + 0.05
    return w / w.sum()


def test_a_tree_knows_its_children_depths_paths_and_leaves():
    tree = chain_tree([7, 8, 9], None, [Sibling(1, 4), Sibling(0, 3)])
    assert tree.parents == [ROOT, 0, 1, 0, ROOT]
    assert tree.children(ROOT) == [0, 4] and tree.children(0) == [1, 3]
    assert tree.depth(3) == 2 and tree.path(3) == [0, 3] and tree.leaves() == [2, 3, 4]
    with pytest.raises(ValueError, match="not an earlier node"):
        Tree().add(1, 0)


def test_the_walk_takes_the_child_equal_to_the_targets_draw_and_says_which_it_turned_down():
    tree = chain_tree([7, 8, 9], None, [Sibling(1, 4)])
    best = {0: 7, 1: 4, 4: 2}  # the target: 7, then 4 (the sibling), then 2 after it
    walk = walk_by_draw(tree, lambda r: best[r])
    assert walk.path == (0, 3) and walk.token == 2 and walk.rejected is None  # a leaf: the token is a bonus
    walk = walk_by_draw(tree, lambda r: {0: 7, 1: 5}[r])
    assert walk.path == (0,) and walk.token == 5 and walk.rejected == 1  # both children turned down


def _draft_tree(rng, noise_free: bool = True) -> Tree:
    """The tree drafter's procedure on the made-up draft: a chain of two sampled tokens, each with a sibling drawn
    from q without the chain's token (whether a sibling exists does not depend on the tokens drawn), and the first
    sibling with a child of its own."""
    tree = Tree()
    q0 = _q(())
    x0 = sample_from(q0, rng)
    tree.add(x0, ROOT, q0)
    q1 = _q((x0,))
    tree.add(sample_from(q1, rng), 0, q1)
    rest0 = without(q0, [x0])
    tree.add(sample_from(rest0, rng), ROOT, rest0)
    rest1 = without(q1, [tree.tokens[1]])
    tree.add(sample_from(rest1, rng), 0, rest1)
    q2 = _q((tree.tokens[2],))  # the root's branch goes one token deeper (a general tree)
    tree.add(sample_from(q2, rng), 2, q2)
    return tree


def test_recursive_rejection_sampling_keeps_the_targets_law_of_the_first_two_tokens():
    """χ² of the first two emitted tokens against p's exact law, over trees with siblings at both levels."""
    rng = np.random.default_rng(5)
    draws = 20_000
    counts = np.zeros((V, V))
    for _ in range(draws):
        tree = _draft_tree(rng)

        class Rows:
            def __getitem__(self, row):
                return _p(tuple(tree.tokens[v] for v in tree.path(row - 1)))

        walk = recursive_rejection_sample(Rows(), tree, rng)
        emitted = [tree.tokens[v] for v in walk.path] + [walk.token]
        if len(emitted) < 2:
            emitted.append(sample_from(_p((emitted[0],)), rng))
        counts[emitted[0], emitted[1]] += 1
    law = np.array([[_p(())[a] * _p((a,))[b] for b in range(V)] for a in range(V)])
    assert counts[law == 0].sum() == 0, "a token the target cannot choose was emitted"
    mask = law > 0
    expected = law[mask] * draws
    chi2 = float(((counts[mask] - expected) ** 2 / expected).sum())
    assert mask.sum() - 1 == 15 and chi2 < CHI2_CRIT[15], (chi2, counts)


def test_a_deterministic_sibling_is_judged_against_the_residual():
    """Siblings without q (greedy top-2) are onehot proposals: exact too (χ² of the first token)."""
    rng = np.random.default_rng(3)
    p0 = np.array([0.1, 0.4, 0.2, 0.3, 0.0])
    tree = Tree()
    tree.add(1, ROOT)
    tree.add(3, ROOT)
    counts = np.zeros(V)
    draws = 20_000
    for _ in range(draws):
        walk = recursive_rejection_sample([p0, np.full(V, 0.2), np.full(V, 0.2)], tree, rng)
        counts[tree.tokens[walk.path[0]] if walk.path else walk.token] += 1
    mask = p0 > 0
    chi2 = float(((counts[mask] - p0[mask] * draws) ** 2 / (p0[mask] * draws)).sum())
    assert counts[~mask].sum() == 0 and chi2 < CHI2_CRIT[3], (chi2, counts)


def test_the_coupled_rule_on_a_tree_emits_the_seeds_tokens_whatever_was_drafted():
    """The target's Gumbel-max draw at each absolute position is fixed by the seed: a tree with the right token on
    a branch keeps the same tokens as a tree without it, and as plain sampling."""
    sampler = SamplerSettings(temperature=1.0, seed=9)
    logits = np.log(np.array([[0.2, 0.3, 0.1, 0.25, 0.15]] * 4))
    noise = GumbelNoise(9)
    history = [0, 0, 0]
    first = judge_tree(logits, Tree(), history, sampler, Rule.COUPLED, np.random.default_rng(0), noise).token
    wrong = (first + 1) % V
    chained = judge_tree(logits, chain_tree([wrong], None, []), history, sampler, Rule.COUPLED,
                         np.random.default_rng(0), noise)
    branched = judge_tree(logits, chain_tree([wrong], None, [Sibling(0, first)]), history, sampler, Rule.COUPLED,
                          np.random.default_rng(0), noise)
    assert chained.token == first and branched.path == (1,)
    assert branched.token == judge_tree(logits, Tree(), history + [first], sampler, Rule.COUPLED,
                                        np.random.default_rng(0), noise).token


def test_a_report_counts_offers_hits_and_the_chains_kept_tokens():
    tree = chain_tree([7, 8, 9], None, [Sibling(1, 4), Sibling(2, 5)])
    walk = walk_by_draw(tree, lambda r: {0: 7, 1: 4, 4: 1}[r])
    step = TreeStep(tree, walk, 3)
    assert (step.offered, step.hit, step.chain_kept) == (2, 0, 1)
    assert step.shown([0.9, 0.8, 0.7, 0.2, 0.1]) == ([7, 4], [0.9, 0.2])
    nodes = step.nodes(lambda t: f"<{t}>".encode())
    assert [n.kept for n in nodes] == [True, False, False, True, False]
    assert [n.branch for n in nodes] == [False, False, False, True, True] and nodes[3].text == "<4>"
    assert TreeStep().offered == 0 and TreeStep().hit is None and TreeStep(tree, Walk((0,), 5, 1), 3).shown(
        [0.9, 0.8, 0.7, 0.2, 0.1]) == ([7, 8], [0.9, 0.8])


def test_a_siblings_tail_hangs_below_it_and_a_report_counts_it_as_offered_not_as_a_branch():
    """chain [7, 8, 9]; sibling 4 at position 0 with tail [6, 2]; sibling 5 at position 2 (its tail is cut to K)."""
    sibs = [Sibling(0, 4, prob=0.3, tail=(6, 2), tail_probs=(0.6, 0.5)),
            Sibling(2, 5, prob=0.2, tail=(3,), tail_probs=(0.4,))]
    tree = chain_tree([7, 8, 9], None, sibs)
    assert tree.tokens == [7, 8, 9, 4, 6, 2, 5, 3] and tree.parents == [ROOT, 0, 1, ROOT, 3, 4, 1, 6]
    assert tree.children(3) == [4] and tree.depth(5) == 3 and tree.depth(7) == 4
    cut = chain_tree([7, 8, 9], None, cut_siblings(sibs, 3))
    assert max(cut.depth(v) for v in range(len(cut))) == 3 and cut.tokens == [7, 8, 9, 4, 6, 2, 5]
    assert [s.size for s in cut_siblings(sibs, 1)] == [1]  # the chain cut to one token: its sibling alone
    probs = node_probs([0.9, 0.8, 0.7], sibs)
    assert probs == [0.9, 0.8, 0.7, 0.3, 0.6, 0.5, 0.2, 0.4]
    walk = walk_by_draw(tree, lambda r: {0: 4, 4: 6, 5: 1}[r])  # the target takes the sibling and its tail's first
    step = TreeStep(tree, walk, 3)
    assert walk.path == (3, 4) and walk.rejected == 5
    assert (step.offered, step.siblings, step.hit, step.chain_kept) == (5, 2, 0, 0)
    assert step.shown(probs) == ([4, 6, 2], [0.3, 0.6, 0.5])
    late = TreeStep(tree, walk_by_draw(tree, lambda r: {0: 7, 1: 8, 2: 5, 7: 3, 8: 1}[r]), 3)
    assert late.walk.path == (0, 1, 6, 7) and late.hit == 1 and late.chain_kept == 2  # the second sibling
    nodes = late.nodes(lambda t: b"x")
    assert [n.parent for n in nodes] == tree.parents and [n.kept for n in nodes][6:] == [True, True]
