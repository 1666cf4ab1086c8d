"""Where greedy speculation and plain decoding part, and whether that is rounding or a fault.

A batched verify pass and a one-token step sum in different orders on different kernels (GPUs and x86 CPUs
alike), and the KV cells a batched pass writes differ in the last bits from a one-token step's, so two greedy runs
of one target may part where its top two logits are close. How close depends on the model and the machine: on a
2-core EPYC a Q4_K_M 1.5B model's top-two gaps move by up to 0.39 over one 96-token reply (batched passes of 5
against one-token steps along the same tokens), far more than the 0.1 that covers the small F32 models. So a parting is judged against what this target's
passes measurably do on this machine along the same text: :func:`divergence` replays the history both ways and
calls a parting a near-tie when its gap is under the largest gap change the replay shows (and never under
``NEAR_TIE``, the partings seen on every machine). A real choice is worth whole logits: a gap above both is a fault.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from app.engine.pair import Pair

NEAR_TIE = 0.1  # partings seen at gaps up to 0.086 on every model tried (the floor of the measured judgement)
REPLAY_PASSES = (5, 9)  # batched pass sizes the rounding is measured at (K = 4 and 8, with the pending token)


def near_tie(parting: dict) -> bool:
    """Whether a :func:`divergence` is rounding (its gap under the measured rounding or ``NEAR_TIE``)."""
    return parting["gap"] < max(NEAR_TIE, parting.get("rounding") or 0.0)


def divergence(pair: Pair, prompt: Sequence[int], plain: Sequence[int], spec: Sequence[int]) -> Optional[dict]:
    """First position where two outputs differ: ``{"position", "gap", "rounding", "near_tie"}``. ``gap``: the
    target's top-1 minus top-2 logit there, on the row plain decoding computed (the prompt prefilled less its last
    token, then one-token steps; a batched pass rounds that row differently, so a gap read from one would misjudge
    a near-tie). ``rounding``: the most that batched passes (``REPLAY_PASSES``) over the same tokens move any of
    these rows' top-two gaps. Costs ``len(plain)`` single steps and a few batched passes, only where outputs
    differ."""
    pos = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
    if pos is None:
        if len(plain) == len(spec):
            return None
        pos = min(len(plain), len(spec))
    history = [prompt[-1]] + list(plain[:pos])
    one = _rows(pair, prompt, history, 1)
    top2 = np.partition(one[-1], -2)[-2:]
    gap = float(abs(top2[1] - top2[0]))
    rounding = max(_gap_change(one, _rows(pair, prompt, history, n)) for n in REPLAY_PASSES)
    out = {"position": pos, "gap": gap, "rounding": rounding}
    out["near_tie"] = near_tie(out)
    return out


def _rows(pair: Pair, prompt: Sequence[int], history: Sequence[int], size: int) -> np.ndarray:
    """The target's rows over ``history`` after the prompt (less its last token), in passes of ``size`` tokens."""
    pair.reset()
    pair.target.sync(list(prompt[:-1]), need_logits=False)
    rows: list[np.ndarray] = []
    for i in range(0, len(history), size):
        chunk = list(history[i:i + size])
        rows.extend(np.array(pair.target.decode(chunk, range(len(chunk))), dtype=np.float64))
    return np.array(rows)


def _gap_change(one: np.ndarray, batched: np.ndarray) -> float:
    """The largest change of a row's top-two gap (the top two of the one-token row) between the two replays."""
    top = np.argsort(one, axis=1)[:, -2:]
    idx = np.arange(len(one))
    a = one[idx, top[:, 1]] - one[idx, top[:, 0]]
    b = batched[idx, top[:, 1]] - batched[idx, top[:, 0]]
    return float(np.abs(a - b).max())


def parting_words(parting: dict) -> str:
    """A :func:`divergence` in words: its gap, the rounding measured beside it, and the verdict."""
    rounding = parting.get("rounding")
    measured = f"; batched passes move this reply's gaps by up to {rounding:.2g} here" if rounding is not None else ""
    verdict = "a near-tie, which kernels may round either way" if near_tie(parting) else "not a near-tie: a fault"
    return f"top-1/top-2 logit gap {parting['gap']:.3g}{measured}: {verdict}"
