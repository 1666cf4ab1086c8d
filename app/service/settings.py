"""Generation settings as the UI and the API see them: one flat dict, validated, turned into a GenConfig.

Missing keys take the app's defaults (the built-in ones below, overridden by ``AppState.defaults``, where
the pair lab puts tuned values); unknown keys are an error naming them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from app.engine import limits
from app.engine.errors import BadInput
from app.engine.loop import DEFAULT_K_MAX, DEFAULT_P_MIN, GenConfig
from app.engine.names import LookupMemory, ProposerName
from app.engine.decoding.sampling import SamplerSettings

_GEN = GenConfig()  # the engine's defaults
DEFAULTS: dict[str, Any] = {
    "speculative": True,  # speculation on/off
    "proposer": _GEN.proposer,  # "draft" (the draft model), "lookup", "mtp" (the target's MTP head) or "auto" (both)
    "k": _GEN.k,  # draft length: a positive integer or "auto" (limits.k_setting)
    "k_max": DEFAULT_K_MAX,
    "p_min": DEFAULT_P_MIN,
    "rule": _GEN.rule,
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
    "repeat_last_n": 64,
    "max_tokens": _GEN.max_tokens,
    "seed": None,  # None or -1: a fresh seed each run
    "system": "",  # optional system prompt (chat)
    # what prompt lookup may copy: this conversation's text, or also every earlier reply the pair served (then
    # the copied tokens are counted apart and said beside the speedup)
    "lookup_memory": LookupMemory.CONVERSATION,
}
# Who drafts, in words: (in a sentence, the short label of a reply line). One table for every place that says it.
PROPOSER_WORDS: dict[str, tuple[str, str]] = {
    ProposerName.DRAFT: ("the draft model", "draft"),
    ProposerName.LOOKUP: ("prompt lookup", "prompt lookup"),
    ProposerName.MTP: ("the target's MTP head", "MTP head"),
    ProposerName.AUTO: ("auto (prompt lookup or the draft model, per step)", "auto"),
    ProposerName.TREE: ("the drafter's tree (a branch where it is unsure, verified in the same pass)", "tree"),
}


def proposer_words(proposer: str, short: bool = False) -> str:
    """'the draft model' / 'draft' for ``"draft"``; an unknown name is said as it is."""
    words = PROPOSER_WORDS.get(proposer)
    return (words[1] if short else words[0]) if words else proposer


ALIASES = {"spec": "speculative", "repetition_penalty": "repeat_penalty", "max_new_tokens": "max_tokens"}
INTS = ("top_k", "repeat_last_n", "max_tokens", "k_max")
FLOATS = ("temperature", "top_p", "min_p", "repeat_penalty", "p_min")


class SettingsError(BadInput, ValueError):
    """Bad generation settings; the message names the offending keys or values."""


def defaults(overrides: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    out = dict(DEFAULTS)
    for key, value in (overrides or {}).items():
        key = ALIASES.get(key, key)
        if key in DEFAULTS:  # the pair lab may store more than we use (e.g. the draft's name)
            out[key] = value
    return out


def resolve(settings: Optional[Mapping[str, Any]], base: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Complete ``settings`` with ``base`` (the app's defaults) and normalise the types.

    Raises SettingsError naming unknown keys or values of the wrong type."""
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise SettingsError(f"settings must be a JSON object, not {type(settings).__name__}")
    unknown = sorted(k for k in settings if ALIASES.get(k, k) not in DEFAULTS)
    if unknown:
        raise SettingsError(f"unknown setting{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
                            f"(known: {', '.join(DEFAULTS)})", param=unknown[0])
    out = dict(base) if base is not None else defaults()
    for key, value in settings.items():
        out[ALIASES.get(key, key)] = value
    try:
        for key in INTS:
            out[key] = _int(out[key], key)
        for key in FLOATS:
            out[key] = _float(out[key], key)
    except (TypeError, ValueError) as exc:
        raise SettingsError(str(exc), param=key) from None
    out["speculative"] = _bool(out["speculative"])
    try:
        out["k"] = limits.k_setting(out["k"], text=True)
    except limits.LimitError as exc:
        raise SettingsError(str(exc), param="k") from None
    seed = out["seed"]
    try:
        out["seed"] = None if seed in (None, "", -1, "-1") else _int(seed, "seed")
        limits.check_settings(out)  # every range, named as the user wrote it
    except ValueError as exc:
        raise SettingsError(str(exc), param=getattr(exc, "param", None) or "seed") from None
    out["proposer"] = str(out["proposer"]).strip().lower()
    out["lookup_memory"] = str(out["lookup_memory"]).strip().lower()  # (GenConfig.validate checks the word)
    if out["system"] is not None and not isinstance(out["system"], str):
        raise SettingsError(f"system must be a string, not {type(out['system']).__name__}", param="system")
    out["system"] = out["system"] or ""
    to_config(out)  # the engine's own check
    out["lookup_memory"] = LookupMemory(out["lookup_memory"])
    return out


def to_config(s: Mapping[str, Any], speculative: Optional[bool] = None) -> GenConfig:
    """The engine's GenConfig for resolved settings (``speculative`` overrides the switch)."""
    sampler = SamplerSettings(temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"], min_p=s["min_p"],
                              repeat_penalty=s["repeat_penalty"], repeat_last_n=s["repeat_last_n"], seed=s["seed"])
    cfg = GenConfig(max_tokens=s["max_tokens"], sampler=sampler,
                    speculative=s["speculative"] if speculative is None else speculative,
                    proposer=s["proposer"], k=s["k"], k_max=s["k_max"], p_min=s["p_min"], rule=s["rule"],
                    ignore_eos=s.get("ignore_eos", False), min_tokens=s.get("min_tokens", 0),  # (the API's alone)
                    lookup_memory=s.get("lookup_memory", LookupMemory.CONVERSATION))
    try:
        return cfg.validate()
    except ValueError as exc:
        raise SettingsError(str(exc), param=getattr(exc, "param", None)) from None


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {limits.shown(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{name} must be an integer, not {limits.shown(value)}")
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, not {limits.shown(value)}") from None


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, not {limits.shown(value)}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, not {limits.shown(value)}") from None


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        if value.strip().lower() in ("on", "true", "yes", "1"):
            return True
        if value.strip().lower() in ("off", "false", "no", "0"):
            return False
        raise SettingsError(f"speculative must be on/off (true/false), not {value!r}", param="speculative")
    return bool(value)
