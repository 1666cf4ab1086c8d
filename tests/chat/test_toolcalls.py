"""Tool calls, engine side: the prompt (the template's own or llama.cpp's generic fallback), the grammar of a
forced call, the reply parsed back (whole and streamed); on the demo pair (SmolLM2, whose template knows no
tools) a forced call's arguments validate against the tool's schema, with speculation on and off."""

from __future__ import annotations

import json

import pytest

from app.engine.events import DoneEvent
from app.engine.decoding.grammar import compile_grammar
from app.engine.loop import GenConfig, generate
from app.engine.decoding.sampling import SamplerSettings
from app.engine.decoding.text import render_chat
from app.chat.toolcalls import (ChoiceMode, ToolError, ToolStyle, parse_choice, parse_tools, tool_grammar,
                                  tool_prompt, tool_style)
from app.chat.toolparse import ContentDelta, ToolCallDelta, ToolCallParser

from support.schema_check import validate
from support.greedy import assert_same_greedy

from chat.test_toolparse import _feed_all

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                   "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]

HERMES_TEMPLATE = (  # the shape of Qwen2.5's template, cut down
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>"
    "\nFor each function call, return a json object within <tool_call></tool_call> XML tags<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_tools_and_choices_are_checked():
    tools = parse_tools([WEATHER, TIME])
    assert parse_choice("required", tools).forced and parse_choice(None, tools).mode == ChoiceMode.AUTO
    named = parse_choice({"type": "function", "function": {"name": "get_time"}}, tools)
    assert named.mode == ChoiceMode.FUNCTION and named.name == "get_time"
    for bad, words in [("sometimes", "tool_choice must be"), ({"function": {"name": "nope"}}, "not among the tools")]:
        with pytest.raises(ToolError, match=words):
            parse_choice(bad, tools)
    for bad, words in [({"type": "function"}, r"tools\[0\]"), ([WEATHER, WEATHER], "distinct")]:
        with pytest.raises(ToolError, match=words):
            parse_tools(bad if isinstance(bad, list) else [bad])


def test_styles_come_from_the_template(smol_pair):
    assert tool_style(smol_pair.target.chat_template()) == ToolStyle.GENERIC
    assert tool_style(HERMES_TEMPLATE) == ToolStyle.HERMES
    assert tool_style("{% if tools %}<|python_tag|>{% endif %}") == ToolStyle.LLAMA3


def test_a_template_that_knows_tools_renders_them_and_earlier_calls():
    tools = parse_tools([WEATHER])
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"}]
    prompt = tool_prompt(HERMES_TEMPLATE, history, tools, parse_choice("auto", tools))
    assert prompt.style == ToolStyle.HERMES and prompt.grammar is None
    text = render_chat(HERMES_TEMPLATE, prompt.messages, tools=prompt.tools)
    assert '"name": "get_weather"' in text and "<tools>" in text
    assert '"arguments": {"city": "Paris", "unit": "celsius"}' in text  # arguments as JSON, not a quoted string
    assert "18 C, clear" in text and "None" not in text


def test_the_generic_fallback_describes_the_tools_in_the_system_turn(smol_pair):
    tools = parse_tools([WEATHER, TIME])
    history = [{"role": "system", "content": "Be brief."}] + ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"}]
    prompt = tool_prompt(smol_pair.target.chat_template(), history, tools, parse_choice("auto", tools))
    assert prompt.style == ToolStyle.GENERIC and prompt.tools is None and prompt.grammar is not None
    system = prompt.messages[0]
    assert system["role"] == "system" and system["content"].startswith("Be brief.") and "get_time" in system["content"]
    assert [m["role"] for m in prompt.messages] == ["system", "user", "assistant", "user"]
    assert json.loads(prompt.messages[3]["content"])["tool_response"]["content"] == "18 C, clear"
    assert smol_pair.chat_prompt(prompt.messages, tools=prompt.tools)  # renders and tokenises


def _prompt_ids(pair, messages, tools, choice, parallel=True) -> list[int]:
    prompt = tool_prompt(pair.target.chat_template(), messages, tools, choice, parallel)
    return pair.chat_prompt(prompt.messages, tools=prompt.tools)


def _reply(pair, messages, tools, choice, parallel=True, **kw):
    prompt = tool_prompt(pair.target.chat_template(), messages, tools, choice, parallel)
    ids = _prompt_ids(pair, messages, tools, choice, parallel)
    pair.reset()
    cfg = GenConfig(max_tokens=160, grammar=prompt.grammar, **kw)
    parser, done = ToolCallParser(prompt.style), None
    for ev in generate(pair.target, ids, cfg, pair.proposer(cfg), length=pair.draft_length(cfg)):
        if isinstance(ev, DoneEvent):
            done = ev
        elif getattr(ev, "text", ""):
            parser.feed(ev.text)
    assert done is not None and done.reason == "eog", done
    return parser.finish()[1], list(done.tokens)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
@pytest.mark.parametrize("parallel", [True, False])
def test_a_forced_call_on_the_demo_pair_validates_against_the_schema(smol_pair, choice, parallel):
    tools = parse_tools([WEATHER, TIME])
    forced = parse_choice(choice, tools)
    plain, plain_ids = _reply(smol_pair, ASK, tools, forced, parallel, speculative=False)
    assert plain.tool_calls and plain.finish_reason == "tool_calls"
    schemas = {t.name: t.parameters for t in tools}
    for call in plain.tool_calls:
        validate(json.loads(call.arguments), schemas[call.name])
        assert forced.mode != ChoiceMode.FUNCTION or call.name == "get_weather"
    spec, spec_ids = _reply(smol_pair, ASK, tools, forced, parallel, k=4)
    prompt = _prompt_ids(smol_pair, ASK, tools, forced, parallel)
    assert_same_greedy(smol_pair, prompt, plain_ids, spec_ids)  # a near-tie may break either way (support/greedy.py)


def test_a_sampled_forced_call_validates_too(smol_pair):
    tools = parse_tools([WEATHER, TIME])
    for seed in range(3):
        parsed, _ = _reply(smol_pair, ASK, tools, parse_choice("required", tools), False, rule="coupled",
                           sampler=SamplerSettings(temperature=0.7, top_p=0.9, seed=seed))
        call = parsed.tool_calls[0]
        validate(json.loads(call.arguments), {t.name: t.parameters for t in tools}[call.name])


def test_the_native_forced_grammars_compile_and_constrain(smol_pair):
    """Hermes and Llama 3 forced-call grammars, run on the demo model's vocabulary."""
    tools = parse_tools([WEATHER])
    forced = parse_choice("required", tools)
    ids = smol_pair.chat_prompt(ASK)
    for style in (ToolStyle.HERMES, ToolStyle.LLAMA3):
        grammar = tool_grammar(tools, forced, False, style)
        compile_grammar(smol_pair.target, grammar)
        smol_pair.reset()
        cfg = GenConfig(max_tokens=160, grammar=grammar, k=4)
        done = [e for e in generate(smol_pair.target, ids, cfg, smol_pair.proposer(cfg)) if isinstance(e, DoneEvent)]
        _, parsed = _feed_all(style, done[0].text, 1000)
        assert len(parsed.tool_calls) == 1, done[0].text
        validate(json.loads(parsed.tool_calls[0].arguments), WEATHER["function"]["parameters"])


def test_a_gguf_template_that_knows_tools_gets_them_and_a_forced_call_parses(coder_pair):
    template = coder_pair.target.chat_template()
    assert tool_style(template) == ToolStyle.HERMES
    tools = parse_tools([WEATHER, TIME])
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"}]
    prompt = tool_prompt(template, history, tools, parse_choice("auto", tools))
    text = render_chat(template, prompt.messages, tools=prompt.tools)
    assert "<tools>" in text and '"name": "get_time"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in text
    assert "<tool_response>\n18 C, clear\n</tool_response>" in text
    forced = parse_choice("required", tools)
    plain, plain_ids = _reply(coder_pair, ASK, tools, forced, False, speculative=False)
    spec, spec_ids = _reply(coder_pair, ASK, tools, forced, False, proposer="lookup", k=4)
    assert spec_ids == plain_ids and len(plain.tool_calls) == 1 and plain.content == ""
    call = plain.tool_calls[0]
    validate(json.loads(call.arguments), {t.name: t.parameters for t in tools}[call.name])


def test_a_tool_result_round_trip_on_the_demo_pair(smol_pair):
    """After a call and its result the generic fallback's reply parses: an answer, or a call that validates."""
    tools = parse_tools([WEATHER, TIME])
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"}]
    parsed, _ = _reply(smol_pair, history, tools, parse_choice("auto", tools), k=4)
    assert parsed.content or parsed.tool_calls
    for call in parsed.tool_calls:
        validate(json.loads(call.arguments), {t.name: t.parameters for t in tools}[call.name])
    answer = {"type": "object", "properties": {"forecast": {"type": "string"}}, "required": ["forecast"],
              "additionalProperties": False}
    prompt = tool_prompt(smol_pair.target.chat_template(), history, tools, parse_choice("auto", tools), response=answer)
    assert "forecast" in prompt.grammar.to_gbnf() and "forecast" not in tool_prompt(
        smol_pair.target.chat_template(), history, tools, parse_choice("auto", tools)).grammar.to_gbnf()
