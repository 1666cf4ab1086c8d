"""Greedy replies through the OpenAI-compatible API, checked the way that holds on every machine (the two checks
of ``support.greedy``, made from what the API returns).

A greedy request that asks for ``logprobs`` gets, for each emitted token, the target's log-softmax of the verify
row that token came from and that row's likeliest tokens. So, through HTTP alone:

1. **The target chose every token** (exact everywhere): each token's logprob is its row's largest.
2. **Another greedy reply agrees, up to a near-tie**: where the two texts part, the row of the token there has its
   top two within ``NEAR_TIE`` (a log-softmax keeps logit differences, so logprob gaps are logit gaps).

A grammar masks the rows after the logprobs are taken, so check 1 cannot apply there; ``assert_same_masked``
judges a parting between two such replies by the gap between the two tokens chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from openai.types.completion_choice import Logprobs

from support.greedy import NEAR_TIE

TOP = 2  # the top two of each row: enough for both checks


@dataclass(frozen=True)
class Row:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]  # the row's likeliest tokens and their logprobs, highest first


def rows(reply: Any) -> list[Row]:
    """The emitted tokens of a chat or legacy completion reply (or of a list of streamed chunks) with their rows."""
    if isinstance(reply, list):
        return [r for chunk in reply if chunk.choices for r in _rows_of(chunk.choices[0])]
    return _rows_of(reply.choices[0])


def _rows_of(choice: Any) -> list[Row]:
    lp = choice.logprobs
    if lp is None:
        return []
    if isinstance(lp, Logprobs):  # the legacy completions' format
        return [Row(tok, logprob, tuple(sorted(top.items(), key=lambda t: -t[1])))
                for tok, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)]
    return [Row(e.token, e.logprob, tuple((t.token, t.logprob) for t in e.top_logprobs)) for e in lp.content or []]


def assert_target_chose(reply: Any) -> list[Row]:
    """Check 1: every token of a greedy reply is the argmax of its own row (a tie counts); the rows."""
    got = rows(reply)
    assert got, "ask the reply for logprobs (top_logprobs >= 1)"
    misses = [f"token {i} {r.token!r}: {r.logprob:.5f} < the row's best {r.top[0][1]:.5f}"
              for i, r in enumerate(got) if r.top and r.logprob < r.top[0][1] - 1e-6]
    assert not misses, "tokens the target did not choose in its own pass: " + "; ".join(misses[:5])
    return got


def parting(text: str, other: Sequence[Row]) -> Optional[int]:
    """The index of the token of ``other`` where its text first differs from ``text`` (None when equal)."""
    joined = "".join(r.token for r in other)
    if joined == text:
        return None
    at = next((i for i, (a, b) in enumerate(zip(text, joined)) if a != b), min(len(text), len(joined)))
    end = 0
    for i, r in enumerate(other):
        end += len(r.token)
        if end > at:
            return i
    return len(other) - 1


def assert_same_greedy_text(text: str, reply: Any, label: str = "") -> None:
    """Check 1 on ``reply``, then check 2 against the text of another greedy run of the same target: equal, or
    parted first where ``reply``'s row had its top two under ``NEAR_TIE`` apart (batched and one-token passes
    round differently on different kernels, GPUs and x86 CPUs alike; see support.greedy)."""
    got = assert_target_chose(reply)
    i = parting(text, got)
    if i is None:
        return
    top = got[i].top
    gap = top[0][1] - top[1][1] if len(top) > 1 else float("inf")
    assert gap < NEAR_TIE, (f"{label + ': ' if label else ''}parted at token {i} ({got[i].token!r}), where the "
                            f"target's top two were {gap:.3g} apart: not a near-tie (< {NEAR_TIE})")


def assert_same_masked(plain: Any, other: Any, label: str = "") -> None:
    """Check 2 for two greedy replies under one grammar (which masks the rows, so check 1 cannot apply): equal, or
    parted first where the two tokens chosen there are within ``NEAR_TIE`` in ``other``'s row. Both were allowed
    (each run chose its own), so their gap is the gap among the allowed tokens that the grammar's argmax broke."""
    a, b = rows(plain), rows(other)
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x.token != y.token), None)
    if i is None:
        assert len(a) == len(b), f"{label}: one reply stopped early ({len(a)} tokens against {len(b)})"
        return
    there = dict(b[i].top)
    assert a[i].token in there, (f"{label}: parted at token {i} ({a[i].token!r} against {b[i].token!r}); the "
                                 f"first is not among the row's {len(there)} likeliest: not a near-tie")
    gap = b[i].logprob - there[a[i].token]
    assert gap < NEAR_TIE, (f"{label}: parted at token {i} ({a[i].token!r} against {b[i].token!r}), "
                            f"{gap:.3g} apart: not a near-tie (< {NEAR_TIE})")


def greedy(create, top: int = TOP, **kw) -> Any:
    """A greedy call of ``client.chat.completions.create`` or ``client.completions.create`` that returns the
    rows the checks need."""
    chat = "messages" in kw
    extra = {"logprobs": True, "top_logprobs": top} if chat else {"logprobs": top}
    return create(temperature=0, **extra, **kw)
