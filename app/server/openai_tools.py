"""A chat request's tools and output format, turned into what the engine needs: the messages to render (and
the tools to hand the template), the grammar the reply must follow, and how to read tool calls out of it.

Tools go through the engine's ``toolcalls``: a template that knows tools renders them itself; one that does not
(the demo pair's) gets llama.cpp's generic fallback, the tools described in the system turn and a JSON reply,
grammar-constrained when ``tool_choice`` forces a call. ``response_format`` and llama.cpp's ``grammar`` /
``json_schema`` fields become a grammar (``structured``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from app.engine.decoding.grammar import GrammarSpec
from app.chat.toolcalls import ChoiceMode, ToolStyle, parse_choice, parse_tools, tool_prompt
from app.server import openai_schema as schema
from app.server.structured import grammar_of, response_schema


@dataclass(frozen=True)
class ChatPlan:
    messages: list  # what to render
    tools: Optional[list]  # for a template that knows tools (None: none, or described in the messages)
    grammar: Optional[GrammarSpec]  # the reply's grammar
    style: Optional[ToolStyle]  # how to read tool calls from the reply (None: no tools, plain text)


def output_grammar(req: schema._Common) -> Optional[GrammarSpec]:
    return grammar_of(req.response_format, req.grammar, req.json_schema)


def grammar_param(req: schema._Common, plan: Optional["ChatPlan"] = None) -> str:
    """The request field a grammar came from (named in the 400 if llama.cpp's parser refuses it)."""
    if plan is not None and plan.style is not None:
        return "tools"
    return "grammar" if req.grammar is not None else "json_schema" if req.json_schema is not None \
        else "response_format"


def chat_plan(req: schema.ChatRequest, messages: list[dict], template: Optional[str]) -> ChatPlan:
    """The plan of a chat request; ToolError / GrammarError (400, naming the field) for what cannot be used."""
    grammar = output_grammar(req)
    tools = parse_tools(req.tools) if req.tools is not None else []
    choice = parse_choice(req.tool_choice, tools)
    has_turns = any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
    if not tools and not has_turns:
        return ChatPlan(messages, None, grammar, None)
    tp = tool_prompt(template, messages, tools, choice, parallel=req.parallel_tool_calls is not False,
                     response=response_schema(req.response_format))
    calling = bool(tools) and choice.mode != ChoiceMode.NONE
    return ChatPlan(tp.messages, tp.tools, tp.grammar if calling and tp.grammar is not None else grammar,
                    tp.style if calling else None)
