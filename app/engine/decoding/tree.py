"""Token trees: several draft branches verified in one target pass, and the rules that keep one path of them.

A tree hangs below the pending token (the root, row 0 of the verify pass). Node ``v`` (0-based) holds a drafted
token, its parent (``-1``: the root) and, where it was sampled, the distribution it was drawn from *given its
earlier siblings* (None: a deterministic proposal, ``q = onehot``). Nodes come parents first, and siblings in the
order they are judged. Row ``v + 1`` of the pass is the target's distribution after node ``v``'s path.

The rules walk down from the root: at each node the target either takes one child (the walk goes on from it) or
none, and then supplies the next token itself (a correction; at a leaf, the bonus token).

- Temperature 0, sample-and-match and the coupled rule draw the target's token at the node first (its argmax, a
  sample of ``p``, the Gumbel-max sample with the position's noise) and take the child equal to it. The emitted
  text is the target's own draws, so these are exact as their one-branch forms are (``verify.py``,
  ``coupled.py``), and the coupled rule's seed holds: the token at each absolute position is the same Gumbel-max
  sample of ``p`` whatever was drafted, chain or tree.
- ``recursive_rejection_sample`` (rejection sampling at T > 0) judges the children one after another: child
  ``j`` (token ``x_j``, drawn from ``q_j``) is accepted with probability ``min(1, p_j(x_j) / q_j(x_j))``; on
  rejection the target moves to the residual ``p_{j+1} = norm(max(0, p_j - q_j))`` and the next child is judged
  against it; when every child is rejected, the token is drawn from the last residual. Each round is Leviathan et
  al.'s accept/residual step with the residual's draw replaced by another round whose output is distributed as
  that residual, so the node's token is distributed exactly as ``p`` (by induction over the rounds). Siblings
  drawn with replacement from one ``q`` (``q_j = q``) give SpecInfer's multi-step speculative sampling; siblings
  drawn *without* replacement (``q_j`` is ``q`` with the earlier siblings removed, renormalised: the tree
  drafter's) give recursive rejection sampling. Either way the proof needs ``x_j ~ q_j`` given everything that
  decided the tree's shape at that node, so a drafter must decide whether a node gets a sibling before drawing it
  and without looking at its earlier siblings' tokens (``drafters/tree.py`` decides from ``q``'s top probability).

References:
- X. Miao, G. Oliaro, Z. Zhang, X. Cheng, Z. Wang, et al. SpecInfer: Accelerating Large Language Model Serving with
  Tree-based Speculative Inference and Verification. ASPLOS 2024, arXiv:2305.09781 (token trees verified in one
  pass with a tree attention mask; multi-step speculative sampling, Algorithm 2).
- W. Jeon, M. Gagrani, R. Goel, J. Park, M. Lee, C. Lott. Recursive Speculative Decoding: Accelerating LLM
  Inference via Sampling Without Replacement. arXiv:2402.14160 (recursive rejection sampling over siblings drawn
  without replacement).
- Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu. SpecTr: Fast Speculative Decoding via Optimal
  Transport. NeurIPS 2023, arXiv:2310.15141 (several drafts judged against one target distribution).
- Y. Leviathan, M. Kalman, Y. Matias. Fast Inference from Transformers via Speculative Decoding. ICML 2023,
  arXiv:2211.17192 (the one-branch accept/residual step).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

import numpy as np

from app.engine.decoding.coupled import GumbelNoise, Rows, gumbel_max
from app.engine.decoding.sampling import SamplerSettings, distribution, greedy_token, recent_window
from app.engine.decoding.verify import residual, sample_from
from app.engine.names import Rule

ROOT = -1  # a node's parent when it hangs below the pending token


@dataclass
class Tree:
    """Drafted nodes below the pending token (see the module docstring)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # each node's parent (ROOT or an earlier node)
    q: list[Optional[np.ndarray]] = field(default_factory=list)  # what each token was drawn from (None: deterministic)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, q: Optional[np.ndarray] = None) -> int:
        """Append a node; its index."""
        if not ROOT <= parent < len(self.tokens):
            raise ValueError(f"node {len(self.tokens)}'s parent {parent} is not an earlier node")
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.q.append(q)
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        """The children of ``node`` (ROOT: the first level), in the order they are judged."""
        return [v for v, parent in enumerate(self.parents) if parent == node]

    def depth(self, node: int) -> int:
        """1 for a child of the root (0 for ROOT)."""
        d = 0
        while node != ROOT:
            node, d = self.parents[node], d + 1
        return d

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node`` (empty for ROOT)."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def leaves(self) -> list[int]:
        has_child = set(self.parents)
        return [v for v in range(len(self.tokens)) if v not in has_child]


@dataclass(frozen=True)
class Walk:
    """What a rule kept: the accepted ``path`` (nodes, root first), the ``token`` the target supplies after it,
    and ``rejected``: the first child of the path's end the target turned down (None where the end is a leaf, so
    the token is a bonus)."""

    path: tuple
    token: int
    rejected: Optional[int] = None


def walk_by_draw(tree: Tree, draw: Callable[[int], int]) -> Walk:
    """Greedy, sample-and-match and the coupled rule: ``draw(row)`` is the target's token at a row (row 0: the
    root, row ``v + 1``: after node ``v``); the child equal to it is taken."""
    node, path = ROOT, []  # type: int, list[int]
    while True:
        kids = tree.children(node)
        y = draw(node + 1)
        hit = next((c for c in kids if tree.tokens[c] == y), None)
        if hit is None:
            return Walk(tuple(path), y, kids[0] if kids else None)
        node = hit
        path.append(hit)


def recursive_rejection_sample(p: Rows, tree: Tree, rng: np.random.Generator) -> Walk:
    """Rejection sampling over a tree (the module docstring): ``p[row]`` is the target's distribution at a row
    (row 0: the root; may be lazy). Exact: every emitted token is distributed as the target's ``p`` given the
    tokens before it."""
    node, path = ROOT, []  # type: int, list[int]
    while True:
        kids = tree.children(node)
        target = p[node + 1]
        hit = None
        for c in kids:
            x = tree.tokens[c]
            q = _proposal(tree.q[c], x, len(target))
            if rng.random() < min(1.0, float(target[x]) / float(q[x])):
                hit = c
                break
            target = residual(target, q)
        if hit is None:
            return Walk(tuple(path), sample_from(target, rng), kids[0] if kids else None)
        node = hit
        path.append(hit)


def without(q: np.ndarray, tokens: Sequence[int]) -> Optional[np.ndarray]:
    """``q`` with ``tokens`` removed, renormalised: what a sibling drawn without replacement is drawn from (None
    where nothing is left)."""
    rest = np.array(q, dtype=np.float64, copy=True)
    rest[list(tokens)] = 0.0
    total = rest.sum()
    return rest / total if total > 0.0 else None


def _proposal(q: Optional[np.ndarray], x: int, vocab: int) -> np.ndarray:
    """``q``, or ``onehot(x)`` for a deterministic proposal (also where ``q(x) = 0``, which a drawn token cannot
    have)."""
    if q is not None and q[x] > 0.0:
        return q
    onehot = np.zeros(vocab, dtype=np.float64)
    onehot[x] = 1.0
    return onehot


@dataclass(frozen=True)
class Sibling:
    """A drafted alternative to the main chain's token at draft position ``pos`` (its sibling in the tree), and the
    draft's tokens after it (its ``tail``: each the only child of the one before, the first the sibling's)."""

    pos: int
    token: int
    q: Optional[np.ndarray] = None  # what it was drawn from, given the chain's token (None: deterministic)
    prob: Optional[float] = None  # the draft's probability of it, for display
    tail: tuple = ()  # tokens drafted after it on its branch
    tail_q: tuple = ()  # what each was drawn from given its path (empty: deterministic)
    tail_probs: tuple = ()  # the draft's probability of each, for display

    @property
    def size(self) -> int:
        """Its nodes in the tree: itself and its tail."""
        return 1 + len(self.tail)


def chain_tree(chain: Sequence[int], q: Optional[Sequence[Optional[np.ndarray]]],
               siblings: Sequence[Sibling]) -> Tree:
    """The tree of a chain (node ``i`` is its token ``i``) and siblings of its tokens (after the chain, in
    order of position; a sibling's parent is the chain token before its position), each followed by its tail
    (a tail token's parent is the node before it)."""
    tree = Tree()
    for i, tok in enumerate(chain):
        tree.add(tok, i - 1, q[i] if q is not None else None)
    for s in siblings:
        v = tree.add(s.token, s.pos - 1, s.q)
        for j, tok in enumerate(s.tail):
            v = tree.add(tok, v, s.tail_q[j] if s.tail_q else None)
    return tree


def node_probs(probs: Sequence[Optional[float]], siblings: Sequence[Sibling]) -> list[Optional[float]]:
    """The draft's probabilities by node of :func:`chain_tree`'s tree (``probs``: the chain's)."""
    out = list(probs)
    for s in siblings:
        out += [s.prob, *(s.tail_probs or [None] * len(s.tail))]
    return out


def cut_siblings(siblings: Sequence[Sibling], n: int) -> list[Sibling]:
    """The siblings of a chain cut to its first ``n`` tokens, their tails cut to its depth."""
    out = []
    for s in (s for s in siblings if s.pos < n):
        keep = n - s.pos - 1
        out.append(s if len(s.tail) <= keep else replace(s, tail=s.tail[:keep], tail_q=s.tail_q[:keep],
                                                           tail_probs=s.tail_probs[:keep]))
    return out


class TreeRows:
    """The target's distributions by row of a tree pass, computed on first use (``loop._Rows`` for a tree): row
    ``r`` is conditioned on the history and the path to node ``r - 1``."""

    def __init__(self, logits: np.ndarray, sampler: SamplerSettings, history: Sequence[int], tree: Tree):
        self.logits, self.sampler, self.tree = logits, sampler, tree
        self.recent = list(recent_window(history, sampler))
        self.cache: dict[int, np.ndarray] = {}

    def context(self, row: int) -> list[int]:
        return self.recent + [self.tree.tokens[v] for v in self.tree.path(row - 1)] if self.recent else []

    def __getitem__(self, row: int) -> np.ndarray:
        if row not in self.cache:
            self.cache[row] = distribution(self.logits[row], self.sampler, self.context(row))
        return self.cache[row]


def judge_tree(logits: np.ndarray, tree: Tree, history: Sequence[int], sampler: SamplerSettings, rule: Rule,
               rng: np.random.Generator, noise: Optional[GumbelNoise] = None) -> Walk:
    """The path a tree pass keeps (``logits``: a row per tree row, the root's first) under ``rule`` at the
    sampler's temperature, as ``loop.judge`` does for a chain."""
    rows = TreeRows(logits, sampler, history, tree)
    if sampler.greedy:
        if sampler.repeat_penalty == 1.0:
            return walk_by_draw(tree, lambda r: int(np.argmax(logits[r])))
        return walk_by_draw(tree, lambda r: greedy_token(logits[r], sampler, rows.context(r)))
    if rule == Rule.MATCH:
        return walk_by_draw(tree, lambda r: sample_from(rows[r], rng))
    if rule == Rule.COUPLED and noise is not None:
        base, vocab = len(history), logits.shape[1]
        return walk_by_draw(tree, lambda r: gumbel_max(rows[r], noise.at(base + tree.depth(r - 1), vocab)))
    return recursive_rejection_sample(rows, tree, rng)


@dataclass(frozen=True)
class TreeNode:
    """A node of a tree draft as a step shows it (``StepEvent.branches``): its parent (-1: below the pending
    token), its text, whether the target kept it, and whether it is a branch rather than the main chain."""

    parent: int
    text: str
    kept: bool = False
    branch: bool = False


@dataclass(frozen=True)
class TreeStep:
    """A step's tree and the path its pass kept, as the loop reports them (``chain``: the first nodes, the draft's
    chain; the rest are branches). ``TreeStep()``: a chain step's (no branches)."""

    tree: Tree = field(default_factory=Tree)
    walk: Walk = Walk((), -1)
    chain: int = 0

    @property
    def offered(self) -> int:
        """Branch tokens beside the chain (siblings and their tails)."""
        return len(self.tree) - self.chain

    @property
    def siblings(self) -> int:
        """Branches beside the chain (a sibling and its tail are one)."""
        return sum(1 for v in range(self.chain, len(self.tree)) if self.tree.parents[v] < self.chain)

    @property
    def hit(self) -> Optional[int]:
        """The rank of the branch the kept path went through (None: it stayed on the chain): the path leaves the
        chain at a sibling, whose rank is the siblings before it."""
        v = next((v for v in self.walk.path if v >= self.chain), None)
        return None if v is None else sum(1 for u in range(self.chain, v) if self.tree.parents[u] < self.chain)

    @property
    def chain_kept(self) -> int:
        return sum(1 for v in self.walk.path if v < self.chain) if self.offered else 1 << 30

    def shown(self, probs: Sequence[Optional[float]]) -> tuple[list[int], list[Optional[float]]]:
        """(tokens, the draft's probabilities of them) along the kept path, then the first child turned down after
        it (if any): the draft as the loop emits it; ``probs`` by node."""
        nodes = list(self.walk.path) + ([self.walk.rejected] if self.walk.rejected is not None else [])
        return [self.tree.tokens[v] for v in nodes], [probs[v] for v in nodes]

    def nodes(self, piece: Callable[[int], bytes]) -> tuple:
        """The tree's nodes for display (TreeNode); ``piece``: a token's bytes."""
        kept = set(self.walk.path)
        return tuple(TreeNode(parent=self.tree.parents[v], text=piece(self.tree.tokens[v]).decode("utf-8", "replace"),
                              kept=v in kept, branch=v >= self.chain) for v in range(len(self.tree)))
