"""Tree passes on the real llama.cpp (llama/treekv.py): a tree's rows are the rows its paths give one token at a
time, the kept path is what the cache holds afterwards (a branch's included), the sequence ids each token carries,
and the one-line refusal where the memory is recurrent."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.llama.backend import Model
from app.engine.llama.treekv import TreeError, leaf_seqs
from app.testing import load_options
from support.tinyhybrid import write_lfm2

TOL = 0.05  # a batched pass and single steps round differently (up to 0.027 measured: test_backend.py)


def test_each_token_carries_the_leaves_below_it_and_the_first_childs_leaf_is_sequence_0():
    #      0 (root) -> 1 -> 2 -> 3 ; 1 -> 4 ; 0 -> 5
    parents = [-1, 0, 1, 2, 1, 0]
    assert leaf_seqs(parents) == [[0, 1, 2], [0, 1], [0], [0], [1], [2]]
    assert leaf_seqs([-1]) == [[0]]
    with pytest.raises(TreeError, match="not an earlier node"):
        leaf_seqs([-1, 2, 0])


def _row_after(model: Model, history: list[int]) -> np.ndarray:
    model.reset()
    return np.array(model.sync(history), copy=True)


def test_a_tree_pass_gives_each_paths_rows_and_keeps_the_path_taken(smol_pair):
    target = smol_pair.target
    assert target.tree is not None and target.tree_refusal is None and target.tree.seqs >= 2
    prompt = target.tokenize("The capital of France is")
    r0 = _row_after(target, prompt)
    a, c = (int(t) for t in np.argsort(r0)[::-1][:2])  # the top token, and the runner-up as a branch
    b = int(np.argmax(_row_after(target, prompt + [a])))
    d = int(np.argmax(_row_after(target, prompt + [c])))
    tokens, parents = [prompt[-1], a, b, c, d], [-1, 0, 1, 0, 3]  # root -> a -> b, root -> c -> d
    target.reset()
    target.sync(prompt[:-1], need_logits=False)
    rows = np.array(target.tree.decode(tokens, parents), copy=True)
    assert target.cached == prompt + [a, b]  # sequence 0: the main chain
    for i, path in enumerate([[], [a], [a, b], [c], [c, d]]):
        assert np.abs(rows[i] - _row_after(target, prompt + path)).max() < TOL, path
    target.reset()
    target.sync(prompt[:-1], need_logits=False)
    target.tree.decode(tokens, parents)
    target.tree.keep(tokens, [3])  # the branch's first token only
    assert target.cached == prompt + [c]
    after = np.array(target.decode([d])[0], copy=True)  # the cache holds exactly the kept path: d follows c
    assert np.abs(after - _row_after(target, prompt + [c, d])).max() < TOL
    target.reset()


def test_recurrent_memory_gets_no_tree_and_says_why(tmp_path, smol_paths):
    path = write_lfm2(tmp_path / "hybrid.gguf", smol_paths[1], seed=1)
    with Model(path, load_options(n_ctx=256)) as model:
        assert model.tree is None and "recurrent/hybrid memory" in model.tree_refusal
    with Model(smol_paths[1], load_options(n_ctx=256, tree_seqs=1)) as model:
        assert model.tree is None and "one sequence" in model.tree_refusal
