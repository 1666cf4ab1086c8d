"""What kind of memory a GGUF architecture has, and whether the llama.cpp bundled here can roll it back.

Copied from the vendored llama.cpp (``src/llama-arch.cpp``: ``llm_arch_is_recurrent``, ``llm_arch_is_hybrid``,
``llm_arch_supports_rs_rollback``), by the names GGUF files carry in ``general.architecture``. The engine does
not rely on this table (a loaded model tells it, ``backend.Model.rollback_limit``); it lets the compatibility
check say what to expect before anything is loaded or downloaded.
"""

from __future__ import annotations

import enum
from typing import Optional

from app.engine.llama.nextn import ASSISTANT_ARCHS, MTP_ARCHS

# recurrent or hybrid memory whose state llama.cpp snapshots for partial rollback (n_rs_seq)
ROLLBACK = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                      "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})
# recurrent or hybrid memory without snapshots: no speculation with it as the target
NO_ROLLBACK = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1",
                         "plamo2", "granitehybrid", "qwen3next", "kimi-linear", "minimax-01"})


class Memory(enum.Enum):
    KV = "kv cache"
    ROLLBACK = "recurrent state with rollback snapshots"
    NO_ROLLBACK = "recurrent state without rollback"


def memory(arch: str) -> Memory:
    if arch in ROLLBACK:
        return Memory.ROLLBACK
    if arch in NO_ROLLBACK:
        return Memory.NO_ROLLBACK
    return Memory.KV


def memory_note(arch: str, role: str) -> Optional[str]:
    """One sentence for the compatibility check about a ``role`` ("target"/"draft") of this arch, or None."""
    kind = memory(arch)
    if kind is Memory.ROLLBACK:
        extra = ("rejected draft tokens are dropped with llama.cpp's state snapshots (K at most the snapshots "
                 "kept)" if role == "target" else "it drafts with state checkpoints (a small copy per step)")
        return f"the {role} ({arch}) has hybrid/recurrent memory: {extra}"
    if kind is Memory.NO_ROLLBACK:
        if role == "target":
            return (f"the target ({arch}) has recurrent memory that this llama.cpp cannot roll back: "
                    "speculation is refused for it (plain decoding works)")
        return f"the draft ({arch}) has recurrent memory: it drafts with state checkpoints (a small copy per step)"
    return None


def mtp_note(arch: str, nextn_layers: int) -> Optional[str]:
    """One sentence about a target's MTP (NextN) head, or None when it has none."""
    if nextn_layers <= 0 or arch in ASSISTANT_ARCHS:
        return None
    if arch not in MTP_ARCHS:
        return (f"the target ({arch}) carries {nextn_layers} MTP layer(s), but this llama.cpp builds no MTP graph "
                "for its architecture: it needs a separate draft")
    return (f"the target ({arch}) carries {nextn_layers} MTP layer(s): it can draft for itself (proposer \"mtp\", "
            "\"MTP (built into the target)\"), no separate draft needed")


def assistant_refusal(target_arch: str, draft_arch: str) -> Optional[str]:
    """Why an assistant drafter (a GGUF that drafts from its target's cache, ``engine/drafters/assistant.py``) cannot pair
    this way, or None (also for pairs without one)."""
    if target_arch in ASSISTANT_ARCHS:
        return f"the target ({target_arch}) is an assistant drafter: it runs only as the draft of its target"
    targets = ASSISTANT_ARCHS.get(draft_arch)
    if targets is not None and target_arch not in targets:
        return f"the draft ({draft_arch}) is an assistant drafter for {'/'.join(sorted(targets))} targets, " \
               f"not {target_arch}"
    return None


def assistant_note(draft_arch: str) -> Optional[str]:
    """One sentence about an assistant drafter, or None when the draft is a model of its own."""
    if draft_arch not in ASSISTANT_ARCHS:
        return None
    return (f"the draft ({draft_arch}) is an assistant drafter: it reads the target's own KV cache and hidden rows "
            "(\"assistant drafter\"; no KV cache of its own)")
