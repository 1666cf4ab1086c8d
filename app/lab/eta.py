"""How long a sweep will take on this machine, from what was measured here: pure functions.

A sweep's time is mostly its runs' decoding, so it scales with runs × tokens per run. The best measure of that
is the last sweep of the same pair (its seconds per run-token, warm-ups and loads included); without one, the
pair's plain speed measured here times the tokens to decode (speculative runs are faster and prompts and
loads are not counted, so it is rougher); without either, no estimate — never a figure from another machine.
"""

from __future__ import annotations

from typing import Optional


def estimate(runs: int, tokens: int, last: Optional[dict] = None, plain_tps: Optional[float] = None
             ) -> Optional[tuple[float, str]]:
    """(seconds, what it rests on) for ``runs`` runs of ``tokens`` tokens; ``last``: a stored sweep's result
    (``run_id``, ``duration_s``, ``runs_done``, ``config.max_tokens``); ``plain_tps``: the pair's plain speed."""
    work = runs * tokens
    if work <= 0:
        return None
    done = (last or {}).get("runs_done") or 0
    past_tokens = ((last or {}).get("config") or {}).get("max_tokens") or 0
    seconds = (last or {}).get("duration_s")
    if done and past_tokens and seconds:
        per = float(seconds) / (done * past_tokens)
        return work * per, (f"run #{last.get('run_id')} took {float(seconds):.0f} s for {done} runs of "
                            f"{past_tokens} tokens here")
    if plain_tps:
        basis = f"{runs} runs × {tokens} tokens at the plain speed measured here ({plain_tps:.1f} tok/s)"
        return work / plain_tps, basis
    return None


def remaining(elapsed: float, done: int, total: int) -> Optional[float]:
    """Seconds left at this sweep's own pace so far (None before its first run)."""
    if done <= 0 or total <= 0:
        return None
    return max(elapsed / done * (total - done), 0.0)


def words(est: Optional[tuple[float, str]]) -> str:
    """'≈ 64 s (estimate: run #3 took …)' or why there is none."""
    if est is None:
        return ("time not estimated yet: it needs a sweep or a plain speed measured for this pair here "
                "(Measure plain speed in Chat)")
    seconds, basis = est
    shown = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    return f"≈ {shown} (estimate: {basis})"
