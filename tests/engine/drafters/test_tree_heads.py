"""Tree drafts from the heads that read the target's rows (drafters/tree.py over the MTP head, an EAGLE-3 head, a
DFlash block, the Gemma-4 assistant; llama/treekv.py keeping the rows they read along the kept path), through the
real loop on made-up pairs: greedy output equals plain decoding with branches taken and rejections, the drafts
after a step whose kept path ended on a sibling equal a fresh head's fed the same history, the target's law at
T = 1, and the one-line refusals (an MTP head on a hybrid target, a pair with no drafter)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import pytest

from app.engine.decoding.sampling import SamplerSettings
from app.engine.drafters.assistant import AssistantModel
from app.engine.drafters.dflash import DFlashModel
from app.engine.drafters.eagle3 import Eagle3Model
from app.engine.drafters.mtp import MtpHead, MtpProposer
from app.engine.drafters.tree import TreeProposer
from app.engine.events import DoneEvent, StepEvent
from app.engine.llama.backend import Model
from app.engine.llama.treekv import TreeError
from app.engine.loop import GenConfig, generate
from app.engine.pair import Pair
from app.testing import load_options
from support.loopchi2 import assert_keeps_law, two_token_law
from support.mtpcheck import plain_tokens
from support.tinydflash import write_dflash, write_target
from support.tinyeagle3 import write_eagle3, write_llama
from support.tinygemma4 import write_gemma4, write_gemma4_assistant
from support.tinyglm4mtp import write_glm4moe_mtp
from support.tinymtp import write_qwen35_mtp

GREEDY = SamplerSettings(temperature=0.0)
PROMPT = "Once upon a time, in a land far away, there was"
P_SPLIT = 0.95  # a sibling wherever the head's top-1 is under this: most positions of these made-up heads
# each head's files (target, head: None for the target's own MTP head), how a fresh head beside a fresh target is
# made (the reference drafts) and the χ² test's prompt: one where the made-up head's runner-up at the first
# position is often the target's draw
HEADS: dict[str, tuple[Callable, Optional[Callable], Callable[[Any, Model], Any], str]] = {
    "mtp": (write_glm4moe_mtp, None, lambda _, fresh: MtpHead(fresh), PROMPT),
    "eagle3": (write_llama, write_eagle3, lambda f, fresh: Eagle3Model(f, load_options(n_ctx=1024), fresh),
               "In the beginning"),
    "dflash": (write_target, write_dflash, lambda f, fresh: DFlashModel(f, load_options(n_ctx=1024), fresh),
               "The weather today is"),
    "assistant": (write_gemma4, write_gemma4_assistant,
                  lambda f, fresh: AssistantModel(f, load_options(n_ctx=1024), fresh), "The weather today is"),
}


@pytest.fixture(scope="module", params=sorted(HEADS))
def head_pair(request, tmp_path_factory, smol_paths):
    """(name, the pair, a fresh copy of its target, the head's file) for each head."""
    name = request.param
    write_t, write_h = HEADS[name][:2]
    d = tmp_path_factory.mktemp(f"tree-{name}")
    target = write_t(d / "target.gguf", smol_paths[1], seed=1)
    head = write_h(d / "head.gguf", smol_paths[1], seed=1) if write_h is not None else None
    pair = Pair.load(target, head, load_options(n_ctx=1024))
    with Model(target, load_options(n_ctx=1024)) as fresh:
        yield name, pair, fresh, head
    pair.close()


class RecordingTree(TreeProposer):
    """A ``TreeProposer`` that keeps (history, the chain it drafted) for every call."""

    def __init__(self, chain, p_split: float):
        super().__init__(chain, p_split)
        self.calls: list[tuple[list[int], list[int]]] = []

    def propose(self, history, k, sampler, rng, sample, noise=None):
        draft = super().propose(history, k, sampler, rng, sample, noise)
        self.calls.append((list(history), list(draft.tokens)))
        return draft


def _tree(pair: Pair, cfg: GenConfig) -> RecordingTree:
    spec = pair.proposer(cfg)
    assert isinstance(spec, TreeProposer)
    return RecordingTree(spec.chain, P_SPLIT)


def _run(pair: Pair, prompt, cfg: GenConfig, spec) -> tuple[list[int], list[StepEvent], DoneEvent]:
    pair.reset()
    events = list(generate(pair.target, prompt, cfg, spec))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return list(done.tokens), [e for e in events if isinstance(e, StepEvent)], done


def test_greedy_head_trees_equal_plain_and_drafts_after_a_sibling_equal_a_fresh_heads(head_pair):
    """Branches are built and taken, with rejections, and the output is plain decoding's. After a step whose kept
    path ended on a sibling (its row sat at another batch index of the pass), the head drafts exactly what a fresh
    head on a fresh target that read the history at once drafts: the rows (and, for the assistant, the cache) it
    reads are the kept path's."""
    name, pair, fresh, head_file = head_pair
    prompt = pair.target.tokenize(PROMPT)
    plain = plain_tokens(fresh, prompt, 48)
    cfg = GenConfig(max_tokens=48, sampler=GREEDY, k=3, proposer="tree")
    spec = _tree(pair, cfg)
    tokens, steps, done = _run(pair, prompt, cfg, spec)
    assert tokens == plain, name  # (a made-up model's logits are far from near-ties)
    s = done.stats
    assert s.tree_steps > 0 and s.rejections > 0 and s.branch_hits > 0, (name, s)
    ends, after = len(prompt), set()  # the history lengths after each step; those after a branch hit
    for e in steps:
        ends += e.emitted
        if e.branch_hit:
            kept = [n for n in e.branches if n.kept]
            assert kept and kept[-1].branch  # greedy: a hit ends the path on the sibling (it is a leaf)
            after.add(ends)
    checked = [c for c in spec.calls if len(c[0]) in after]
    assert checked, name
    with HEADS[name][2](head_file, fresh) as ref:
        for history, drafted in checked + spec.calls[1::4]:
            fresh.reset()
            fresh.sync(history[:-1], need_logits=False)
            ref.reset()
            logits = ref.sync(history)
            for i, d in enumerate(drafted):
                assert int(np.argmax(logits)) == d, (name, len(history))
                if i + 1 < len(drafted):
                    logits = ref.decode([d])[0]


def test_head_trees_keep_the_targets_law_at_t1(head_pair):
    """χ² of the first two tokens at T = 1, top-k 3, K 2 through the real loop with rejection sampling over the
    tree; branches are offered at most positions and taken (on a prompt where the head's runner-up is often the
    target's draw)."""
    name, pair, fresh, _ = head_pair
    prompt = pair.target.tokenize(HEADS[name][3])
    fresh.reset()
    law = two_token_law(fresh, prompt, SamplerSettings(temperature=1.0, top_k=3))
    seen = {"tree": 0, "hits": 0}

    def first_two(seed: int):
        cfg = GenConfig(max_tokens=2, k=2, proposer="tree", sampler=SamplerSettings(temperature=1.0, top_k=3, seed=seed))
        _, steps, done = _run(pair, prompt, cfg, _tree(pair, cfg))
        seen["tree"] += sum(e.tree for e in steps)
        seen["hits"] += sum(e.branch_hit for e in steps)
        return done.tokens

    assert_keeps_law(law, first_two, draws=1000)
    assert seen["tree"] >= 500 and seen["hits"] >= 20, (name, seen)


def test_mtp_trees_on_a_hybrid_target_are_refused_in_one_line(tmp_path, smol_paths):
    """``tree`` without a draft model is the MTP head's chain with branches; a hybrid target (every MTP arch the
    suite can write) refuses the pass in one line, and a target with neither drafter refuses the proposer."""
    path = write_qwen35_mtp(tmp_path / "mtp.gguf", smol_paths[1], seed=1)
    with Pair.load(path, None, load_options(n_ctx=256)) as pair:
        cfg = GenConfig(max_tokens=4, sampler=GREEDY, k=2, proposer="tree")
        spec = pair.proposer(cfg)
        assert isinstance(spec, TreeProposer) and isinstance(spec.chain, MtpProposer)
        with pytest.raises(TreeError) as err:
            list(generate(pair.target, pair.target.tokenize(PROMPT), cfg, spec))
    assert "recurrent/hybrid memory" in str(err.value) and "\n" not in str(err.value)
    bare = write_qwen35_mtp(tmp_path / "bare.gguf", smol_paths[1], seed=1, mtp=False)
    with Pair.load(bare, None, load_options(n_ctx=256)) as pair:
        with pytest.raises(TreeError, match="no draft model and its target no MTP head"):
            pair.proposer(GenConfig(k=2, proposer="tree"))
