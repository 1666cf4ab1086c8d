"""Tool calls, engine side: the tools in the prompt, the grammar of a forced call, and (toolparse.py) the reply
read back into calls.

A chat template that knows tools (Qwen2.5/Qwen3/Hermes ``<tool_call>``, Llama 3.1 JSON) gets them through the
template itself, as the model was trained. One that does not (the demo pair's SmolLM2) gets llama.cpp's generic
fallback (``common_chat_params_init_generic`` and minja's polyfills, llama.cpp before its auto parser): the
tools described in a system turn, earlier calls and tool results written as JSON in ordinary turns, and a reply
in JSON, ``{"tool_call": {"name", "arguments"}}`` (``{"tool_calls": [...]}`` when parallel calls are allowed)
or ``{"response": "..."}``, always grammar-constrained so even a small model answers in a shape that parses.

A forced call (``tool_choice`` required or a named function) is constrained by a grammar in every style.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional, Sequence

from app.engine.errors import BadInput
from app.engine.decoding.grammar import GrammarSpec, schema_to_gbnf


class ToolError(BadInput, ValueError):
    """Tools, a tool choice or tool messages that cannot be used; the message says which and why."""

    param = "tools"


class ToolStyle(str, Enum):
    GENERIC = "generic"  # the template knows no tools: tools in a system turn, a JSON reply (grammar)
    HERMES = "hermes"  # <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5, Qwen3, Hermes)
    LLAMA3 = "llama3"  # {"name": ..., "parameters": {...}} (Llama 3.1/3.2/3.3 custom tools)


class ChoiceMode(str, Enum):
    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    FUNCTION = "function"  # this one function, by name


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})

    def as_openai(self) -> dict:
        fn = {"name": self.name, "parameters": self.parameters}
        if self.description:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolChoice:
    mode: ChoiceMode = ChoiceMode.AUTO
    name: Optional[str] = None  # mode FUNCTION: the function's name

    @property
    def forced(self) -> bool:
        return self.mode in (ChoiceMode.REQUIRED, ChoiceMode.FUNCTION)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])


@dataclass(frozen=True)
class ToolPrompt:
    """What to render and how to read the reply: messages (polyfilled for the generic style), the tools to hand
    the template (None for the generic style), the grammar for the reply (or None) and the style to parse."""
    messages: list
    tools: Optional[list]
    grammar: Optional[GrammarSpec]
    style: ToolStyle


def parse_tools(tools: Any) -> list[Tool]:
    """OpenAI ``tools`` ([{"type": "function", "function": {"name", "description", "parameters"}}])."""
    if not isinstance(tools, list):
        raise ToolError("tools must be a list of {'type': 'function', 'function': {...}} objects")
    out: list[Tool] = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ToolError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        name = fn.get("name")
        if not isinstance(name, str) or not name or len(name) > 64:
            raise ToolError(f"tools[{i}].function.name must be a non-empty string of at most 64 characters")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object")
        out.append(Tool(name, str(fn.get("description") or ""), params))
    if len({t.name for t in out}) != len(out):
        raise ToolError("tools must have distinct function names")
    return out


def parse_choice(choice: Any, tools: Sequence[Tool]) -> ToolChoice:
    """OpenAI ``tool_choice``: "auto", "none", "required" or {"type": "function", "function": {"name"}}."""
    if choice is None:
        return ToolChoice(ChoiceMode.AUTO if tools else ChoiceMode.NONE)
    if isinstance(choice, str):
        try:
            mode = ChoiceMode(choice)
        except ValueError:
            raise ToolError(f"tool_choice must be 'auto', 'none', 'required' or a function, not {choice!r}") from None
        if mode == ChoiceMode.FUNCTION:
            raise ToolError("tool_choice 'function' needs the function: {'type': 'function', 'function': {...}}")
        if mode == ChoiceMode.REQUIRED and not tools:
            raise ToolError("tool_choice 'required' needs tools")
        return ToolChoice(mode)
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str):
        raise ToolError("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
                        "{'name': ...}}")
    if name not in {t.name for t in tools}:
        raise ToolError(f"tool_choice names {name!r}, which is not among the tools")
    return ToolChoice(ChoiceMode.FUNCTION, name)


def tool_style(template: Optional[str]) -> ToolStyle:
    """How the model calls tools, read from its chat template."""
    if not template or "tools" not in template:
        return ToolStyle.GENERIC
    if "<tool_call>" in template:
        return ToolStyle.HERMES
    if "<|python_tag|>" in template or "ipython" in template:
        return ToolStyle.LLAMA3
    return ToolStyle.GENERIC  # a template that knows tools in a way not read here: the generic fallback


# --- the grammar of a reply ------------------------------------------------------------------------------

def _call_schema(tool: Tool, args_key: str = "arguments") -> dict:
    """One call: its name first (the model chooses the tool, then writes the arguments). llama.cpp's generic
    schema also asks for an ``id`` with parallel calls; a small model can run on in that string forever, and the
    ids are ours to make anyway, so none is asked for."""
    return {"type": "object", "properties": {"name": {"const": tool.name}, args_key: tool.parameters},
            "required": ["name", args_key]}


def _one_of(schemas: list[dict]) -> dict:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def generic_schema(tools: Sequence[Tool], choice: ToolChoice, parallel: bool,
                   response: Optional[dict] = None) -> dict:
    """llama.cpp's generic reply schema: a tool call (or several), or, unless a call is forced, a response
    (a string, or JSON matching ``response``: a ``response_format`` schema given with the tools)."""
    chosen = [t for t in tools if choice.mode != ChoiceMode.FUNCTION or t.name == choice.name]
    calls = [_call_schema(t) for t in chosen]
    if parallel:
        call = {"type": "object", "required": ["tool_calls"],
                "properties": {"tool_calls": {"type": "array", "items": _one_of(calls), "minItems": 1}}}
    else:
        call = {"type": "object", "properties": {"tool_call": _one_of(calls)}, "required": ["tool_call"]}
    if choice.forced:
        return call
    reply = {"type": "object", "properties": {"response": response or {"type": "string"}}, "required": ["response"]}
    return {"anyOf": [call, reply]}


def _wrapped(schema: dict, root: str) -> GrammarSpec:
    """The converter's grammar for ``schema`` as rule ``call``, under a new ``root`` that uses it."""
    rules = schema_to_gbnf(schema).splitlines()
    rules = ["call ::= " + r[len("root ::= "):] if r.startswith("root ::= ") else r for r in rules]
    return GrammarSpec.gbnf(f"root ::= {root}\n" + "\n".join(rules))


def tool_grammar(tools: Sequence[Tool], choice: ToolChoice, parallel: bool, style: ToolStyle,
                 response: Optional[dict] = None) -> Optional[GrammarSpec]:
    """The grammar a reply must follow, or None (free text, read back by the parser). ``response``: a JSON
    schema for a reply that calls no tool (generic style only)."""
    if choice.mode == ChoiceMode.NONE or not tools:
        return None
    if style == ToolStyle.GENERIC:
        return GrammarSpec.json_schema(generic_schema(tools, choice, parallel, response))
    if not choice.forced:
        return None
    chosen = [t for t in tools if choice.mode != ChoiceMode.FUNCTION or t.name == choice.name]
    if style == ToolStyle.HERMES:
        block = '"<tool_call>\\n" call "\\n</tool_call>"'
        return _wrapped(_one_of([_call_schema(t) for t in chosen]), f'{block} ("\\n" {block})*' if parallel else block)
    return _wrapped(_one_of([_call_schema(t, "parameters") for t in chosen]), "call")


# --- the prompt --------------------------------------------------------------------------------------------

GENERIC_INSTRUCTION = ("Respond in JSON format, either with `tool_call` (a request to call tools) or with "
                       "`response` reply to the user's request")


def _arguments(call: dict) -> Any:
    """An earlier call's arguments as a JSON value (OpenAI sends them as JSON text)."""
    fn = call.get("function", call) if isinstance(call, dict) else {}
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args


def _native_messages(messages: Sequence[dict]) -> list[dict]:
    """Messages for a template that knows tools: content never None, call arguments as JSON values."""
    out = []
    for m in messages:
        m = dict(m, content=m.get("content") or "")
        if m.get("tool_calls"):
            m["tool_calls"] = [dict(c, function=dict(c.get("function", {}), arguments=_arguments(c)))
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def _polyfilled(messages: Sequence[dict], parallel: bool) -> list[dict]:
    """minja's polyfills: earlier calls and tool results as JSON in plain turns, replies as ``response``."""
    out: list[dict] = []
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = [{"name": c.get("function", {}).get("name"), "arguments": _arguments(c), "id": c.get("id")}
                     for c in m["tool_calls"]]
            body = {"tool_calls": calls} if parallel or len(calls) > 1 else {"tool_call": calls[0]}
            content = json.dumps(body)
        elif role == "assistant" and content:
            content = json.dumps({"response": content})
        elif role == "tool":
            role = "user"
            content = json.dumps({"tool_response": {"tool": m.get("name", ""), "content": content,
                                                    "tool_call_id": m.get("tool_call_id", "")}})
        out.append({"role": role, "content": content})
    return out


def _described(messages: list[dict], tools: Sequence[Tool], parallel: bool) -> list[dict]:
    """The tools, an example call and the JSON instruction in the system turn (added if there is none)."""
    example = ({"tool_calls": [{"name": "tool_name", "arguments": {"arg1": "some_value"}}]}
               if parallel else {"tool_call": {"name": "tool_name", "arguments": {"arg1": "some_value"}}})
    described = ("You can call any of the following tools to satisfy the user's requests: "
                 + json.dumps([t.as_openai() for t in tools], indent=2)
                 + "\n\nExample tool call syntax:\n\n" + json.dumps(example, indent=2) + "\n\n" + GENERIC_INSTRUCTION)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + described}] + messages[1:]
    return [{"role": "system", "content": described}] + messages


def tool_prompt(template: Optional[str], messages: Sequence[dict], tools: Sequence[Tool],
                choice: ToolChoice, parallel: bool = True, response: Optional[dict] = None) -> ToolPrompt:
    """How to render a conversation with ``tools`` for this template, and the grammar of the reply
    (``response``: a JSON schema for a reply that calls no tool, honoured by the generic style).

    Render with ``Pair.chat_prompt(prompt.messages, tools=prompt.tools)``; generate with
    ``GenConfig(grammar=prompt.grammar)``; read the reply with ``ToolCallParser(prompt.style)``."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ToolError(f"messages[{i}] needs a 'role'")
        if m["role"] == "tool" and not isinstance(m.get("content"), str):
            raise ToolError(f"messages[{i}] (a tool result) needs its 'content' as a string")
    style = tool_style(template)
    if choice.mode == ChoiceMode.NONE or not tools:
        if style == ToolStyle.GENERIC:  # earlier calls and results are still written as the JSON turns
            plain = _polyfilled(messages, parallel) if _has_tool_turns(messages) else \
                [dict(m, content=m.get("content") or "") for m in messages]
            return ToolPrompt(plain, None, None, style)
        return ToolPrompt(_native_messages(messages), None, None, style)
    grammar = tool_grammar(tools, choice, parallel, style, response)
    if style == ToolStyle.GENERIC:
        return ToolPrompt(_described(_polyfilled(messages, parallel), tools, parallel), None, grammar, style)
    return ToolPrompt(_native_messages(messages), [t.as_openai() for t in tools], grammar, style)


def _has_tool_turns(messages: Sequence[dict]) -> bool:
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
