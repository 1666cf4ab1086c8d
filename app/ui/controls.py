"""The generation controls. The shared ones (proposer, K, p_min and the sampler) exist once, in Pair settings,
and Chat and Compare read them; each of those tabs keeps only its own switch and reply length.

Typed fields refuse what is out of range instead of clamping it: the ranges are ``app.engine.limits.RANGES``,
the ones the API and the engine check, and :func:`problem` names the field, its range and the value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import gradio as gr

from app.engine import limits
from app.engine.names import DraftKind, LookupMemory
from app.service import settings as S
from app.service.state import AppState
from app.ui import panel

TUNED = ("speculative", "proposer", "k", "p_min")  # what a Pair lab recommendation sets
LABELS = {"k": "K", "temperature": "Temperature", "max_tokens": "Max tokens", "top_p": "Top-p", "top_k": "Top-k",
          "min_p": "Min-p", "repeat_penalty": "Repetition penalty", "p_min": "p_min", "seed": "Seed"}

GEN: dict[str, Any] = dict(concurrency_id="generation", concurrency_limit=1)  # Gradio queue: one at a time


def range_text(name: str) -> str:
    """'0–5' for a setting's range (the limits' table), for the fields' help texts."""
    r = limits.RANGES[name]
    lo, hi = (f"{int(x)}" if float(x).is_integer() else f"{x:g}" for x in (r.lo, r.hi))
    return f"{lo}–{hi}"


@dataclass
class Controls:
    prefix: str = ""
    names: list[str] = field(default_factory=list)
    components: list[Any] = field(default_factory=list)

    def add(self, name: str, component: Any) -> Any:
        component.elem_id = f"tdm-{self.prefix}-{name.replace('_', '-')}"
        self.names.append(name)
        self.components.append(component)
        return component

    def __add__(self, other: "Controls") -> "Controls":
        """Both sets read together (a tab's own controls and the shared ones); no new components."""
        return Controls(self.prefix, self.names + other.names, self.components + other.components)

    def to_dict(self, values: tuple) -> dict:
        """Raw values of the components, keyed by setting name (``settings.resolve`` normalises them)."""
        out = dict(zip(self.names, values))
        if out.get("seed") is not None and float(out["seed"]) < 0:
            out["seed"] = None
        if isinstance(out.get("lookup_memory"), bool):  # the Chat's checkbox
            out["lookup_memory"] = LookupMemory.PAIR if out["lookup_memory"] else LookupMemory.CONVERSATION
        return out

    def refresh(self, state: AppState) -> list:
        """Current defaults as component updates (the pair lab may have changed them)."""
        d = S.defaults(state.defaults)
        return [gr.update(value=_shown(name, d[name])) for name in self.names]

    def choices(self, state: AppState) -> list:
        """Updates after a pair loads: the proposer's choices (MTP only where the target carries a head)."""
        offered = proposer_choices(state)
        value = _offered(S.defaults(state.defaults)["proposer"], offered)
        return [gr.update(choices=offered, value=value) if name == "proposer" else gr.update() for name in self.names]

    def tuned(self, state: AppState) -> list:
        """Updates for the settings the Pair lab tunes (after "Use this"), from the current defaults."""
        d = S.defaults(state.defaults)
        return self.apply({name: d[name] for name in TUNED})

    def apply(self, settings: dict) -> list:
        """Updates that set only the controls named in ``settings`` (e.g. a tuned K), leaving the rest."""
        return [gr.update(value=_shown(name, settings[name])) if name in settings else gr.update()
                for name in self.names]


def proposer_choices(state: AppState) -> list[tuple[str, str]]:
    """Who may draft for the loaded pair: "MTP (built into the target)" only when its target has an MTP head, and
    "tree (the <drafter>, with branches)" where its target verifies trees and it has a drafter (the draft, else the
    MTP head)."""
    pair = state.pair
    choices = [(pair.draft_kind if pair is not None and pair.draft is not None else DraftKind.MODEL, "draft"),
               ("prompt lookup", "lookup")]  # a Gemma-4 assistant is offered as "assistant drafter"
    if pair is None or pair.draft is not None:
        choices.insert(0, ("auto (both, per step)", "auto"))
    if pair is not None and pair.has_mtp:
        choices.append(("MTP (built into the target)", "mtp"))
    drafter = DraftKind.MODEL if pair is None else pair.draft_kind or ("MTP head" if pair.has_mtp else None)
    if drafter is not None and (pair is None or pair.target.tree is not None):  # the drafter's tree (drafters/tree.py)
        choices.append((f"tree (the {drafter}, with branches)", "tree"))
    return choices


def _offered(proposer: str, offered: list[tuple[str, str]]) -> str:
    """``proposer`` if it is offered for this pair, else the draft model."""
    return proposer if any(v == proposer for _, v in offered) else "draft"


def _shown(name: str, value: Any) -> Any:
    if name == "k":
        return str(value)
    if name == "seed":
        return -1 if value is None else value
    if name == "lookup_memory":
        return value == LookupMemory.PAIR
    return value


def problem(settings: dict) -> Optional[str]:
    """Why these raw control values cannot be used (the field as the form names it, its range, the value), or
    None. The ranges are the limits' table, the one the API and the engine check."""
    k = settings.get("k")
    if k is not None:
        try:
            limits.k_setting(str(k), text=True)
        except ValueError:
            return f"K must be auto or a whole number from {range_text('k')} (got {limits.shown(k)})."
    try:
        for name, label in LABELS.items():
            value = settings.get(name)
            if name == "k" or value is None or (name == "seed" and value in (-1, "", "-1")):
                continue
            if limits.RANGES[name].integer and isinstance(value, float) and value.is_integer():
                value = int(value)
            limits.check(label, value, name)
        S.resolve(settings)
    except ValueError as exc:  # LimitError and SettingsError: their message names the setting and its range
        return str(exc).rstrip(".") + "."
    return None


def summary_html(settings: dict) -> str:
    """The shared settings in one line for Chat and Compare (read-only there), or what is wrong with them."""
    wrong = problem(settings)
    if wrong:
        return panel.status_html(f"{wrong} Fix it in Pair settings.", "error")
    r = S.resolve(settings)
    who = S.proposer_words(r["proposer"])
    t = r["temperature"]
    parts = [f"{who}", panel.k_label(r["k"]), f"T = {t:g}" + (" (greedy)" if t == 0 else ""),
             f"top-p {r['top_p']:g}", f"top-k {r['top_k']}", f"min-p {r['min_p']:g}",
             f"repetition penalty {r['repeat_penalty']:g}", "seed " + ("fresh" if r["seed"] is None else str(r["seed"]))]
    if r["system"]:
        parts.append("system prompt set")
    return (f'<div class="tdm-note tdm-settings-line"><b>Settings</b> (from Pair settings): '
            f'{panel.esc(" · ".join(parts))}</div>')


def build_shared(state: AppState) -> Controls:
    """Proposer, K, p_min and the sampler, with defaults from ``state.defaults``; elem ids ``tdm-gen-{name}``."""
    d = S.defaults(state.defaults)
    c = Controls(prefix="gen")
    with gr.Row():
        c.add("proposer", gr.Radio(
            choices=proposer_choices(state), value=_offered(d["proposer"], proposer_choices(state)),
            label="Proposer", info="Who drafts: the small draft model, n-gram lookup in the prompt, auto (each step "
                                   "lookup where the text repeats, else the draft model), or the target's own MTP head "
                                   "(targets that carry one)."))
        c.add("k", gr.Textbox(
            value=str(d["k"]), label="K (draft length)", max_lines=1,
            info=f"auto, or {range_text('k')} tokens drafted per target pass; auto adapts K to recent "
                 f"acceptance (and pauses drafting where it would not pay)."))
        c.add("p_min", gr.Slider(
            0.0, 0.95, value=d["p_min"], step=0.05, label="p_min (auto K)",
            info="With K = auto, stop drafting when the draft's confidence falls below this."))
    with gr.Row():
        c.add("temperature", gr.Number(value=d["temperature"], step=0.05, label="Temperature",
                                       info=f"{range_text('temperature')}; 0 = greedy (deterministic)."))
        c.add("top_p", gr.Slider(0.05, 1.0, value=d["top_p"], step=0.01, label="Top-p"))
        c.add("top_k", gr.Slider(0, 200, value=d["top_k"], step=1, label="Top-k", info="0 = off"))
    with gr.Row():
        c.add("min_p", gr.Slider(0.0, 0.5, value=d["min_p"], step=0.01, label="Min-p"))
        c.add("repeat_penalty", gr.Slider(0.8, 2.0, value=d["repeat_penalty"], step=0.01,
                                          label="Repetition penalty", info="1 = off"))
        c.add("seed", gr.Number(value=-1 if d["seed"] is None else d["seed"], precision=0, label="Seed",
                                info="-1 = a fresh seed each run."))
    c.add("system", gr.Textbox(value=d["system"], label="System prompt", lines=2,
                               placeholder="optional", info="Sent first, through the chat template."))
    return c


def build_local(state: AppState, prefix: str, speculation_switch: bool = True) -> Controls:
    """A tab's own controls: the speculation switch (Chat) and the reply length; elem ids ``tdm-{prefix}-{name}``."""
    d = S.defaults(state.defaults)
    c = Controls(prefix=prefix)
    with gr.Row():
        if speculation_switch:
            c.add("speculative", gr.Checkbox(
                value=d["speculative"], label="Speculative decoding",
                info="Off: plain decoding with the target only (same sampler, same output at temperature 0)."))
        c.add("max_tokens", gr.Number(value=d["max_tokens"], precision=0, label="Max tokens",
                                      info=f"{range_text('max_tokens')}; generation also stops when the "
                                           f"context is full."))
    if speculation_switch:  # (Compare's runs always start clean: no run may copy another's reply)
        c.add("lookup_memory", gr.Checkbox(
            value=_shown("lookup_memory", d["lookup_memory"]), label="Lookup remembers earlier replies",
            info="Off: prompt lookup copies only from this conversation. On: also from every reply since the pair "
                 "was loaded (a repeated question runs faster; the panel counts the copied tokens). New chat "
                 "turns it off."))
    return c
