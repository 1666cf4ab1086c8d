"""The generation controls (speculation + sampling), built once per tab that needs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from app.engine.loop import DEFAULT_K_MAX
from app.service import settings as S
from app.service.state import AppState

K_CHOICES = ["auto"] + [str(k) for k in range(1, DEFAULT_K_MAX + 1)]
TUNED = ("speculative", "proposer", "k", "p_min")  # what a Pair lab recommendation sets

GEN: dict[str, Any] = dict(concurrency_id="generation", concurrency_limit=1)  # Gradio queue: one at a time


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

    def to_dict(self, values: tuple) -> dict:
        """Raw values of the components, keyed by setting name (``settings.resolve`` normalises them)."""
        out = dict(zip(self.names, values))
        if out.get("seed") is not None and float(out["seed"]) < 0:
            out["seed"] = None
        return out

    def refresh(self, state: AppState) -> list:
        """Current defaults as component updates (the pair lab may have changed them)."""
        d = S.defaults(state.defaults)
        return [gr.update(value=_shown(name, d[name])) for name in self.names]

    def tuned(self, state: AppState) -> list:
        """Updates for the settings the Pair lab tunes (after "Use this"), from the current defaults."""
        d = S.defaults(state.defaults)
        return self.apply({name: d[name] for name in TUNED})

    def apply(self, settings: dict) -> list:
        """Updates that set only the controls named in ``settings`` (e.g. a tuned K), leaving the rest."""
        return [gr.update(value=_shown(name, settings[name])) if name in settings else gr.update()
                for name in self.names]


def _shown(name: str, value: Any) -> Any:
    if name == "k":
        return str(value)
    if name == "seed":
        return -1 if value is None else value
    return value


def build(state: AppState, prefix: str, speculation_switch: bool = True, system_prompt: bool = True) -> Controls:
    """Speculation and sampling controls, with defaults from ``state.defaults``; elem ids ``tdm-{prefix}-{name}``."""
    d = S.defaults(state.defaults)
    c = Controls(prefix=prefix)
    with gr.Accordion("Speculation", open=True, elem_id=f"tdm-{prefix}-speculation"):
        if speculation_switch:
            c.add("speculative", gr.Checkbox(
                value=d["speculative"], label="Speculative decoding",
                info="Off: plain decoding with the target only (same sampler, same output at temperature 0)."))
        with gr.Row():
            c.add("proposer", gr.Radio(
                choices=[("auto (both)", "auto"), ("draft model", "draft"), ("prompt lookup", "lookup")],
                value=d["proposer"], label="Proposer",
                info="Who drafts: auto chooses each step between lookup (text that repeats) and the draft model."))
            c.add("k", gr.Dropdown(
                choices=K_CHOICES, value=str(d["k"]), label="K (draft length)", allow_custom_value=False,
                info="Tokens drafted per target pass; auto adapts K to recent acceptance."))
        c.add("p_min", gr.Slider(
            0.0, 0.95, value=d["p_min"], step=0.05, label="p_min (auto K)",
            info="With K = auto, stop drafting when the draft's confidence falls below this."))
    with gr.Accordion("Sampling", open=False, elem_id=f"tdm-{prefix}-sampling"):
        with gr.Row():
            c.add("temperature", gr.Slider(0.0, 2.0, value=d["temperature"], step=0.05, label="Temperature",
                                           info="0 = greedy (deterministic)."))
            c.add("max_tokens", gr.Slider(1, 2048, value=d["max_tokens"], step=1, label="Max tokens"))
        with gr.Row():
            c.add("top_p", gr.Slider(0.05, 1.0, value=d["top_p"], step=0.01, label="Top-p"))
            c.add("top_k", gr.Slider(0, 200, value=d["top_k"], step=1, label="Top-k", info="0 = off"))
        with gr.Row():
            c.add("min_p", gr.Slider(0.0, 0.5, value=d["min_p"], step=0.01, label="Min-p"))
            c.add("repeat_penalty", gr.Slider(0.8, 2.0, value=d["repeat_penalty"], step=0.01,
                                              label="Repetition penalty", info="1 = off"))
        c.add("seed", gr.Number(value=-1 if d["seed"] is None else d["seed"], precision=0, label="Seed",
                                info="-1 = a fresh seed each run."))
        if system_prompt:
            c.add("system", gr.Textbox(value=d["system"], label="System prompt", lines=2,
                                       placeholder="optional", info="Sent first, through the chat template."))
    return c
