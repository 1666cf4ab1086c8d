"""The made-up pair the tree-draft tests share: a llama target and a bigram draft of the demo vocabulary (the draft's
blocks add nothing), whose runner-up is often the target's choice, so branches and their tails are taken."""

from __future__ import annotations

from pathlib import Path

from app.engine.pair import Pair
from app.testing import load_options
from support.tinyeagle3 import write_llama


def made_up_tree_pair(folder: Path, vocab_from: Path) -> Pair:
    """Write the two models into ``folder`` and load them (a 1024-token context); the caller closes the pair."""
    target = write_llama(folder / "target.gguf", vocab_from, seed=1)
    draft = write_llama(folder / "bigram.gguf", vocab_from, seed=2, trunk=0.0)
    return Pair.load(target, draft, load_options(n_ctx=1024))
