"""Which speedup the Chat may claim for a reply, and how it knows: pure functions.

A speedup is shown only for a speculative reply, and only as one of
- **measured**: the reply's tokens/s over a plain run of the *same prompt* made on demand right after it,
  or, without one, over the plain speed stored for this pair on this machine (its age in the label): one
  source of truth, the reply's own tok/s, so the figure agrees with the tok/s beside it;
- **estimate** (only with no plain speed measured here, and only for a reply that mostly drafted): what the
  model predicts from this reply's own α, mean K and draft/verify times,
  E(α, K) / (K·c + v) (``stats.leviathan_bound``), where c and v are relative to one plain target step,
  taken from the reply's plain (paused) steps when it has enough of them, else from the stored plain speed,
  whose age is shown.
The last Compare of the same pair and settings is shown beside it, with its age, as a second measurement.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from app.engine.stats import costs, expected_tokens
from app.engine.summary import Summary

MIN_PLAIN_STEPS = 3  # plain steps inside a reply needed to time a target step from the reply itself
MIN_SAVED_S = 1.0  # replies shorter than this get no estimated "seconds saved"
SPEED_KEYS = ("proposer", "k", "k_max", "p_min", "rule", "temperature", "top_k", "top_p", "min_p",
              "repeat_penalty")


def age(seconds: Optional[float]) -> str:
    """'just now', '40 s ago', '5 min ago', '3 h ago', '2 days ago'."""
    if seconds is None:
        return "at an unknown time"
    s = max(seconds, 0.0)
    if s < 5:
        return "just now"
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 90 * 60:
        return f"{s / 60:.0f} min ago"
    if s < 36 * 3600:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} days ago"


def stamp_age(stamp: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds since a stored 'YYYY-MM-DD HH:MM:SS' stamp (local time; older ones without seconds), or None."""
    for form in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            then = time.mktime(time.strptime(str(stamp), form))
        except (TypeError, ValueError, OverflowError):
            continue
        return (now if now is not None else time.time()) - then
    return None


def estimate(summary: Summary, baseline: Optional[Mapping[str, Any]] = None,
             now: Optional[float] = None) -> Optional[dict]:
    """The model's speedup estimate for one speculative reply, with what it rests on; None if it cannot be
    made (nothing drafted, or no way to time a plain target step)."""
    if not summary.drafted or not summary.spec_steps:
        return None
    step = target_step(summary, None, baseline, now)
    if step is None:
        return None
    t_step, source = step
    c, v, bound = costs(summary, 1.0 / t_step)
    if bound is None:
        return None
    return {"kind": "estimate", "speedup": bound, "alpha": summary.alpha, "k": summary.mean_k,
            "c": c, "v": v, "source": source}


def target_step(summary: Summary, claim: Optional[Mapping[str, Any]] = None,
                baseline: Optional[Mapping[str, Any]] = None, now: Optional[float] = None
                ) -> Optional[tuple[float, str]]:
    """(seconds of one plain target step, where that comes from): a measured claim's plain speed, else the
    reply's own plain (paused) steps when it has enough of them, else the stored plain speed with its age."""
    if claim and claim.get("plain_tps"):
        return 1.0 / float(claim["plain_tps"]), claim["source"]
    plain_steps = summary.steps - summary.spec_steps
    if plain_steps >= MIN_PLAIN_STEPS and summary.t_verify > summary.t_verify_spec:
        t_step = (summary.t_verify - summary.t_verify_spec) / plain_steps
        return t_step, f"a plain target step timed in this reply ({plain_steps} plain steps, {1 / t_step:.1f} tok/s)"
    if baseline and baseline.get("tps"):
        tps = float(baseline["tps"])
        when = f"measured {age(stamp_age(baseline['measured_at'], now))}" if baseline.get("measured_at") else "stored"
        return 1.0 / tps, f"the plain speed {when} for this pair here ({tps:.1f} tok/s)"
    return None


def draft_costs(summary: Summary, claim: Optional[Mapping[str, Any]] = None,
                baseline: Optional[Mapping[str, Any]] = None, now: Optional[float] = None) -> Optional[dict]:
    """What a drafting pass of this reply cost, in plain target steps: ``c`` (draft seconds per drafted token ÷
    one plain target step), ``v`` (a verify pass ÷ one plain target step), ``pass_cost`` = K·c + v, the tokens a
    drafting pass yields by the model, E(α, K), and ``predicted`` = E / (K·c + v); None when nothing was drafted
    or no plain target step is timed (see ``target_step``)."""
    step = target_step(summary, claim, baseline, now)
    if not summary.drafted or not summary.spec_steps or step is None:
        return None
    t_step, source = step
    c, v, _ = costs(summary, 1.0 / t_step)
    if c is None or v is None:
        return None
    tokens = expected_tokens(summary.alpha, summary.mean_k)
    cost = summary.mean_k * c + v
    return {"c": c, "v": v, "k": summary.mean_k, "alpha": summary.alpha, "tokens": tokens, "pass_cost": cost,
            "predicted": tokens / cost if cost > 0 else None, "source": source}


def measured(summary: Summary, plain: Optional[Mapping[str, Any]], now: Optional[float] = None
             ) -> Optional[dict]:
    """The reply's tokens/s over a plain run of the same prompt (``plain``: tps, at, reply_at)."""
    tps = summary.tokens_per_s
    if not plain or not plain.get("tps") or not tps:
        return None
    after = (plain.get("at") or 0) - (plain.get("reply_at") or 0)
    return {"kind": "measured", "speedup": tps / float(plain["tps"]), "plain_tps": float(plain["tps"]),
            "source": f"a plain run of the same prompt {after:.0f} s after the reply "
                      f"({float(plain['tps']):.1f} tok/s)"}


def against_baseline(summary: Summary, baseline: Optional[Mapping[str, Any]], now: Optional[float] = None
                     ) -> Optional[dict]:
    """The reply's tokens/s over the plain speed stored for this pair on this machine, labelled with its age."""
    tps = summary.tokens_per_s
    if not baseline or not baseline.get("tps") or not tps:
        return None
    base = float(baseline["tps"])
    return {"kind": "measured", "speedup": tps / base, "plain_tps": base,
            "source": f"the plain speed measured on this machine {age(stamp_age(baseline.get('measured_at'), now))} "
                      f"({base:.1f} tok/s)"}


def choose(summary: Summary, speculative: bool, plain: Optional[Mapping[str, Any]] = None,
           baseline: Optional[Mapping[str, Any]] = None, now: Optional[float] = None) -> Optional[dict]:
    """Against a plain run of this prompt, else against the stored plain speed, else the model's estimate for
    a reply that mostly drafted; never with speculation off."""
    if not speculative:
        return None
    claim = measured(summary, plain, now) or against_baseline(summary, baseline, now)
    if claim is None and summary.spec_steps * 2 >= summary.steps:
        claim = estimate(summary, None, now)
    return claim


def seconds_saved(summary: Summary, claim: Optional[Mapping[str, Any]]) -> Optional[float]:
    """Decode time saved against plain decoding (negative: lost), from a measured or estimated speedup."""
    t = summary.t_total
    if not claim or not t:
        return None
    if claim["kind"] == "measured":
        return summary.tokens / claim["plain_tps"] - t
    if t < MIN_SAVED_S:  # an estimate from so short a reply says nothing about seconds
        return None
    return t * (claim["speedup"] - 1.0)


def same_length(plain_tokens: int, plain_tps: float, spec_tokens: int, spec_tps: float) -> Optional[dict]:
    """Two runs of one prompt compared at the same number of tokens, so that seconds saved and the speedup agree
    when the outputs differ in length (sampled runs): ``ratio`` = spec tok/s ÷ plain tok/s, and for ``n`` tokens
    (the longer output's) ``plain_s`` at the plain rate against ``spec_s`` at the speculative rate, ``saved`` =
    plain_s − spec_s (negative: lost). None without two measured rates."""
    if plain_tokens <= 0 or spec_tokens <= 0 or plain_tps <= 0 or spec_tps <= 0:
        return None
    n = max(plain_tokens, spec_tokens)
    plain_s, spec_s = n / plain_tps, n / spec_tps
    return {"n": n, "plain_s": plain_s, "spec_s": spec_s, "saved": plain_s - spec_s, "ratio": spec_tps / plain_tps,
            "plain_tokens": plain_tokens, "spec_tokens": spec_tokens}


def signature(pair_key: Optional[str], draft: Optional[str], resolved: Mapping[str, Any]) -> str:
    """What a Compare's speedup depends on: the pair as loaded and the speed-relevant settings."""
    return "|".join([str(pair_key), str(draft)] + [f"{k}={resolved.get(k)}" for k in SPEED_KEYS])


def remember_compare(recent: dict, sig: str, payload: Mapping[str, Any], now: Optional[float] = None) -> None:
    recent[f"compare|{sig}"] = {"speedup": payload.get("speedup"), "at": now if now is not None else time.time(),
                                "prompt": payload.get("prompt", "")}


def last_compare(recent: Mapping[str, Any], sig: str) -> Optional[dict]:
    return recent.get(f"compare|{sig}")
