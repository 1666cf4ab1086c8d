"""A draft model's branches past one token (drafters/tails.py) through the real loop on the made-up pair of
test_tree_drafts.py (a bigram draft whose runner-up is often the target's choice): greedy output equals plain
decoding with tails built and paths kept into them, the draft's cache after such a path is a fresh draft's (its
branch sequences removed), and the heads' proposers get no tails."""

from __future__ import annotations

import llama_cpp as L
import numpy as np
import pytest

from app.engine.control.branches import TAIL
from app.engine.decoding.sampling import SamplerSettings
from app.engine.decoding.tree import TreeNode
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.drafters.tree import TreeProposer
from app.engine.events import DoneEvent, StepEvent
from app.engine.llama.backend import Model
from app.engine.loop import GenConfig, generate, run
from app.engine.pair import Pair
from app.testing import load_options
from support.treepair import made_up_tree_pair

GREEDY = SamplerSettings(temperature=0.0)
STORY = "Once upon a time, in a land far away, there was"


@pytest.fixture(scope="module")
def made_up(tmp_path_factory, smol_paths):
    """The made-up llama target and its bigram draft (test_tree_drafts.py's pair)."""
    pair = made_up_tree_pair(tmp_path_factory.mktemp("tails"), smol_paths[1])
    yield pair
    pair.close()


class RecordingTree(TreeProposer):
    """A ``TreeProposer`` that keeps (history, its draft) for every call."""

    calls: list

    def propose(self, history, k, sampler, rng, sample, noise=None):
        draft = super().propose(history, k, sampler, rng, sample, noise)
        self.calls.append((list(history), draft))
        return draft


def _recording(pair: Pair, cfg: GenConfig) -> RecordingTree:
    spec = pair.proposer(cfg)
    assert isinstance(spec, TreeProposer) and spec.tails is not None  # a draft model of its own: tails
    rec = RecordingTree(spec.chain, spec.p_split, tails=spec.tails)
    rec.calls = []
    return rec


def tail_nodes(nodes: tuple[TreeNode, ...]) -> tuple[list[int], list[int]]:
    """(the tail nodes of a step's tree, those of them judged: their sibling or tail parent kept)."""
    tails = [v for v, n in enumerate(nodes) if n.branch and n.parent >= 0 and nodes[n.parent].branch]
    return tails, [v for v in tails if nodes[nodes[v].parent].kept]


def test_greedy_tails_equal_plain_decoding_and_a_path_into_a_tail_leaves_the_draft_clean(made_up):
    """K = 4: branches with tails are built, some kept paths run through a sibling into its tail, the output is
    plain decoding's; after such a step the draft drafts exactly what a fresh draft model drafts from the same
    history, and its branch sequences are gone."""
    prompt = made_up.target.tokenize(STORY)
    made_up.reset()
    plain, _ = run(made_up.target, prompt, GenConfig(max_tokens=64, sampler=GREEDY, speculative=False))
    cfg = GenConfig(max_tokens=64, sampler=GREEDY, k=4, proposer="tree")
    spec = _recording(made_up, cfg)
    made_up.reset()
    events = list(generate(made_up.target, prompt, cfg, spec))
    done = events[-1]
    assert isinstance(done, DoneEvent) and list(done.tokens) == plain  # (a made-up model's logits are far from ties)
    steps = [e for e in events if isinstance(e, StepEvent)]
    ends, after, built = len(prompt), set(), 0  # history lengths after a path that ended inside a tail
    for e in steps:
        ends += e.emitted
        tails, _ = tail_nodes(e.branches)
        built += len(tails)
        assert e.tree == sum(n.branch for n in e.branches)  # offered: every branch token, tails included
        kept = [v for v, n in enumerate(e.branches) if n.kept]
        if kept and kept[-1] in tails:
            assert e.branch_hit and len(kept) == e.accepted
            after.add(ends)
    assert built > 0 and after, (built, after)
    for _, draft in spec.calls:
        for s in draft.siblings:
            assert len(s.tail) <= min(TAIL, 4 - 1 - s.pos) and len(s.tail_probs) == len(s.tail)
    checked = [c for c in spec.calls if len(c[0]) in after]
    assert checked
    for s in range(1, made_up.draft.tree.seqs):  # every branch sequence removed
        assert L.llama_memory_seq_pos_max(made_up.draft.mem, s) == -1
    with Model(made_up.draft.path, load_options(n_ctx=1024)) as fresh:
        ref = TreeProposer(DraftModelProposer(fresh), tails=fresh.tree)
        for history, draft in checked:
            fresh.reset()
            again = ref.propose(history, 4, GREEDY, np.random.default_rng(0), sample=False)
            assert again.tokens == draft.tokens and [(s.token, s.tail) for s in again.siblings] == \
                [(s.token, s.tail) for s in draft.siblings], len(history)


def test_the_heads_and_a_chain_get_no_tails(made_up):
    """A tree of a proposer that cannot continue its branches (no ``tails``) keeps one-token branches."""
    made_up.reset()
    prompt = made_up.target.tokenize(STORY)
    spec = TreeProposer(DraftModelProposer(made_up.draft))
    assert spec.plan(4) == (4, 0)
    draft = spec.propose(prompt, 4, GREEDY, np.random.default_rng(0), sample=False)
    assert draft.siblings and all(s.tail == () for s in draft.siblings) and draft.t_branches == 0.0
