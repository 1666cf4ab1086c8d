"""What the MTP-head and assistant-drafter tests share: the plain reference run and a proposer that records
each draft it made (both drive the same ``MtpProposer``)."""

from __future__ import annotations

from app.engine.llama.backend import Model
from app.engine.loop import GenConfig, run
from app.engine.drafters.mtp import MtpProposer


def plain_tokens(model: Model, prompt, n: int) -> list[int]:
    """``n`` tokens of plain decoding after ``prompt``, from a cold cache."""
    model.reset()
    return run(model, prompt, GenConfig(max_tokens=n, speculative=False))[0]


class RecordingMtp(MtpProposer):
    """An ``MtpProposer`` that keeps (history, drafted tokens) for every call."""

    def __init__(self, head):
        super().__init__(head)
        self.calls: list[tuple[list[int], list[int]]] = []

    def propose(self, history, k, sampler, rng, sample, noise=None):
        draft = super().propose(history, k, sampler, rng, sample, noise)
        self.calls.append((list(history), list(draft.tokens)))
        return draft
