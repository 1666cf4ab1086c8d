"""The figures of one generation, or of several pooled: :class:`Summary`, a JSON contract.

Apart from ``stats`` (which computes it) so that ``events`` can carry it in a ``DoneEvent`` without the two
modules importing each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Summary:
    """The figures of one generation (``Stats.summary``) or of several pooled (``pool``). The field names and
    their order are a JSON contract (API responses, bench and Pair lab results, saved history): ``to_dict``.
    ``Summary()`` is an empty generation's."""

    tokens: int = 0  # emitted
    steps: int = 0  # target passes
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0  # accepted / drafted
    mean_accepted: float = 0.0  # tokens per target pass
    alpha: float = 0.0  # accepted / (accepted + rejections)
    mean_k: float = 0.0  # drafted tokens per target pass that drafted: the chain's (a tree's branches not counted)
    per_position: list = field(default_factory=list)  # acceptance rate at each draft position
    histogram: list = field(default_factory=list)  # histogram[n] = steps that accepted n tokens
    tested_at: list = field(default_factory=list)
    accepted_at: list = field(default_factory=list)
    rejections: int = 0
    spec_steps: int = 0
    t_verify_spec: float = 0.0
    tokens_per_s: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0  # decode time (prefill excluded)
    baseline_tps: Optional[float] = None
    speedup: Optional[float] = None  # tokens_per_s / baseline_tps
    paused_steps: int = 0
    probe_steps: int = 0
    limit: Optional[str] = None
    c: Optional[float] = None  # see ``costs``
    v: Optional[float] = None
    bound: Optional[float] = None
    efficiency: Optional[float] = None  # speedup / bound
    lookup_drafted: int = 0  # of ``drafted``: by prompt lookup (the rest by the draft model)
    lookup_accepted: int = 0  # of ``accepted``: lookup's
    t_sync: float = 0.0  # of ``t_draft``: the draft model catching up on history it had skipped (a one-off)
    lookup_earlier: int = 0  # of ``lookup_accepted``: copied from an earlier request's text (not this request's)
    tree_steps: int = 0  # passes that verified a tree draft (the chain and branches beside it)
    tree_tokens: int = 0  # of ``drafted``: the branch tokens of those trees
    tree_accepted: int = 0  # of ``accepted``: the paths those passes kept, in tokens
    branch_hits: int = 0  # tree passes whose kept path went through a branch

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def model_drafted(self) -> int:
        return self.drafted - self.lookup_drafted

    @property
    def model_accepted(self) -> int:
        return self.accepted - self.lookup_accepted

    @property
    def lookup_share(self) -> Optional[float]:
        """The share of accepted draft tokens that prompt lookup proposed (None if none was accepted)."""
        return self.lookup_accepted / self.accepted if self.accepted else None

    @property
    def mean_path(self) -> Optional[float]:
        """Draft tokens a tree pass kept, on average (None without tree passes)."""
        return self.tree_accepted / self.tree_steps if self.tree_steps else None

    @property
    def paused_share(self) -> Optional[float]:
        """The share of target passes that auto K decoded plainly because drafting was expected to lose."""
        return self.paused_steps / self.steps if self.steps else None
