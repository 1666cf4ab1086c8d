"""What the decode loop yields. Consumers (UI, benchmark, CLI) see only these, never engine internals."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional, Union

from app.engine.decoding.logprobs import TokenLogprob
from app.engine.decoding.tree import TreeNode
from app.engine.names import StrEnum
from app.engine.summary import Summary


class TokenKind(StrEnum):
    """Provenance of an emitted token."""

    ACCEPTED = "accepted"  # a draft token the target verified
    CORRECTED = "corrected"  # the target's own token at the first rejected draft position
    BONUS = "bonus"  # the extra token after a fully accepted draft
    PLAIN = "plain"  # speculation off: one target step, one token


class Drafter(StrEnum):
    """Which drafter proposed a draft token (``TokenEvent.drafter``)."""

    LOOKUP = "lookup"  # prompt lookup: copied from the context or an earlier request (no model)
    MODEL = "draft"  # the draft model


class StopReason(StrEnum):
    """Why a generation ended (``DoneEvent.reason``)."""

    EOG = "eog"  # the model ended its reply
    MAX_TOKENS = "max_tokens"  # the token budget is spent
    STOPPED = "stopped"  # the caller's stop switch (or a stop string)
    CONTEXT = "context"  # the context window is full


ACCEPTED, CORRECTED, BONUS, PLAIN = TokenKind.ACCEPTED, TokenKind.CORRECTED, TokenKind.BONUS, TokenKind.PLAIN
KINDS = tuple(TokenKind)
LOOKUP, MODEL = Drafter.LOOKUP, Drafter.MODEL


@dataclass(frozen=True)
class TokenEvent:
    token: int
    text: str  # newly printable text ("" while a UTF-8 character is still incomplete)
    kind: TokenKind
    step: int  # target pass that produced it (0-based)
    draft_pos: Optional[int] = None  # position in the draft (0-based) for accepted/corrected tokens
    draft_prob: Optional[float] = None  # the draft's probability of its proposed token at that position
    index: int = 0  # position in the generated sequence (0-based)
    draft_token: Optional[int] = None  # corrected tokens: the draft's proposal that the target rejected
    logprob: Optional[TokenLogprob] = None  # when asked for: the target's log-probability and top alternatives
    drafter: Optional[Drafter] = None  # accepted/corrected tokens: who proposed that draft position


@dataclass(frozen=True)
class StepEvent:
    step: int
    drafted: int  # tokens proposed this step
    accepted: int  # of those, accepted
    emitted: int  # tokens emitted this step (accepted + 1, or 1 without speculation)
    t_draft: float  # seconds spent drafting
    t_verify: float  # seconds in the target's pass (decode + sampling)
    k: int  # the draft limit in force this step
    t_step: float = 0.0  # wall seconds of the whole step (draft + verify + bookkeeping)
    paused: bool = False  # auto K chose not to draft this step (K = 0): drafting is expected to lose
    probe: bool = False  # auto K drafted this step to measure (acceptance, draft and verify costs)
    limit: Optional[str] = None  # while paused: why, in words
    lookup: int = 0  # of ``drafted``, the first ``lookup`` came from prompt lookup (the rest from the draft model)
    lookup_accepted: int = 0  # of ``accepted``, those lookup tokens
    t_sync: float = 0.0  # of ``t_draft``: the draft model catching up on history it had not seen (a one-off)
    wake: bool = False  # paused: ``t_draft`` timed draft tokens that were not proposed (re-measures the draft's cost)
    free_probe: bool = False  # paused: this probe verified a free proposal (prompt lookup): the verify cost
    lookup_earlier: int = 0  # of ``lookup_accepted``, those copied from an earlier request's text (not this one's)
    tree: int = 0  # of ``drafted``: a tree draft's branch tokens beside its chain (``decoding/tree.py``)
    branch_hit: bool = False  # the path the target kept went through a branch (``accepted``: the path's length)
    branches: tuple[TreeNode, ...] = ()  # a tree step's nodes, for display


@dataclass(frozen=True)
class DoneEvent:
    reason: StopReason | str  # the loop may give the value ("eog"): __post_init__ makes it a StopReason
    stats: Summary = field(default_factory=Summary)  # Stats.summary()
    text: str = ""  # the whole generated text
    tokens: tuple = ()  # generated token ids (end-of-generation token excluded)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", StopReason(self.reason))

    def as_dict(self) -> dict:
        """JSON-ready: ``stats`` as ``Summary.to_dict``."""
        return asdict(self)


Event = Union[TokenEvent, StepEvent, DoneEvent]
