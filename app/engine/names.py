"""The names a setting takes, as enums: who drafts, which verification rule, K's adaptive value.

They are ``str`` enums, so a member equals its text (``ProposerName.AUTO == "auto"``) and the JSON, the
command line and stored settings keep the words users type."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A str enum whose members print and format as their value (``enum.StrEnum`` before Python 3.11)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ProposerName(StrEnum):
    """Who drafts (``GenConfig.proposer``)."""

    AUTO = "auto"  # lookup or the draft model, chosen per step (drafters/duo.py); lookup alone without a draft
    DRAFT = "draft"  # the draft model
    LOOKUP = "lookup"  # prompt lookup
    MTP = "mtp"  # the target's own MTP head, or the Gemma-4 assistant
    TREE = "tree"  # the drafter's chain (else the MTP head's) with branches where unsure, one pass (drafters/tree.py)


class Rule(StrEnum):
    """The verification rule at T > 0 (``GenConfig.rule``)."""

    REJECTION = "rejection"  # exact speculative sampling (Leviathan et al. 2022)
    MATCH = "match"  # llama.cpp's sample-and-match
    COUPLED = "coupled"  # Gumbel-max with noise fixed by (seed, position): seeds hold (decoding/coupled.py)


class LookupMemory(StrEnum):
    """What proposer auto's prompt lookup may copy from (``GenConfig.lookup_memory``)."""

    CONVERSATION = "conversation"  # this request's own text: its prompt (a chat's earlier turns) and its reply
    PAIR = "pair"  # also every earlier request and reply the pair served since it was loaded (editors re-asking)


class DraftKind(StrEnum):
    """How a pair's draft drafts (``Pair.draft_kind``), in the words the app shows beside its file name."""

    MODEL = "draft model"  # a small model of its own, run token by token
    ASSISTANT = "assistant drafter"  # Gemma-4's assistant: reads the target's cache and rows (drafters/assistant.py)
    EAGLE3 = "EAGLE-3 head"  # drafts from the inputs of three of the target's layers (drafters/eagle3.py)
    DFLASH = "DFlash block"  # a whole block in one non-causal pass over the target's layer rows (drafters/dflash.py)


class AutoK(StrEnum):
    """K's adaptive setting (``GenConfig.k`` is an integer or this)."""

    AUTO = "auto"


AUTO_K = AutoK.AUTO
# The words users type, for membership checks (a str enum equals its word), messages and argparse choices.
PROPOSERS = tuple(p.value for p in ProposerName)
RULES = tuple(r.value for r in Rule)
LOOKUP_MEMORIES = tuple(m.value for m in LookupMemory)
