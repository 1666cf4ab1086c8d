"""A reply read back into text and tool calls as it streams (app/chat/toolparse.py): Hermes, Llama 3 and the
generic JSON style, fed whole and in pieces, and text that only looks like a call kept as text. No model."""

from __future__ import annotations

import json

import pytest

from app.chat.toolcalls import ToolStyle
from app.chat.toolparse import ContentDelta, ToolCallDelta, ToolCallParser


def _feed_all(style: ToolStyle, reply: str, step: int = 1):
    parser, deltas = ToolCallParser(style), []
    for i in range(0, len(reply), step):
        deltas += parser.feed(reply[i:i + step])
    rest, parsed = parser.finish()
    return deltas + rest, parsed


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_hermes_replies_parse_whole_and_streamed(step):
    reply = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
             '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>')
    deltas, parsed = _feed_all(ToolStyle.HERMES, reply, step)
    assert parsed.content == "Let me check.\n" and parsed.finish_reason == "tool_calls"
    assert [c.name for c in parsed.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(parsed.tool_calls[0].arguments) == {"city": "Paris", "unit": "celsius"}
    assert [d.index for d in deltas if isinstance(d, ToolCallDelta)] == [0, 1]
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == parsed.content
    assert "<" not in parsed.content


def test_hermes_text_that_only_looks_like_a_call_is_kept():
    _, parsed = _feed_all(ToolStyle.HERMES, "a <tool_c and <tool_call>not json</tool_call> end")
    assert parsed.tool_calls == [] and parsed.content == "a <tool_c and <tool_call>not json</tool_call> end"


@pytest.mark.parametrize("reply, names", [
    ('{"name": "get_time", "parameters": {"city": "Oslo"}}', ["get_time"]),
    ('<|python_tag|>{"name": "get_time", "parameters": {"city": "Oslo"}}; '
     '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}', ["get_time", "get_weather"]),
    ("It is sunny.", []),
])
def test_llama3_replies(reply, names):
    deltas, parsed = _feed_all(ToolStyle.LLAMA3, reply)
    assert [c.name for c in parsed.tool_calls] == names
    assert parsed.content == ("" if names else reply)
    if names:
        assert json.loads(parsed.tool_calls[0].arguments) == {"city": "Oslo"}


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_generic_replies(step):
    call = '{"tool_call": {"name": "get_time", "arguments": {"city": "Rome"}}}'
    _, parsed = _feed_all(ToolStyle.GENERIC, call, step)
    assert parsed.tool_calls[0].name == "get_time" and parsed.content == ""
    calls = ('{"tool_calls": [{"name": "get_time", "arguments": {"city": "A"}, "id": "call_1234"}, '
             '{"name": "get_time", "arguments": {}, "id": "xyzw"}]}')
    _, parsed = _feed_all(ToolStyle.GENERIC, calls, step)
    assert [c.id for c in parsed.tool_calls] == ["call_1234", "xyzw"]
    deltas, parsed = _feed_all(ToolStyle.GENERIC, '{"response": "caf\\u00e9 \\"ok\\"\\nbye"}', step)
    assert parsed.content == 'café "ok"\nbye' and not parsed.tool_calls
    if step == 1:
        assert len([d for d in deltas if isinstance(d, ContentDelta)]) > 5  # the response streams
    _, parsed = _feed_all(ToolStyle.GENERIC, "plain words", step)
    assert parsed.content == "plain words"


# --- Qwen2.5-Coder with tool_choice "auto": a call as a fenced block or bare JSON (llama.cpp's Hermes-2-Pro reading)
FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Tokyo"\n  }\n}\n```'
BARE = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


@pytest.mark.parametrize("step", [1, 2, 7, 1000])
@pytest.mark.parametrize("reply, city, content", [
    (FENCED, "Tokyo", ""),
    (BARE, "Paris", ""),
    ("\n" + BARE + "\n", "Paris", ""),
    ("I'll look.\n" + FENCED + "\nThen I answer.", "Tokyo", "I'll look.\n\nThen I answer."),
    ('```\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n```', "Oslo", ""),
])
def test_hermes_fenced_and_bare_calls_parse_whole_and_streamed(reply, city, content, step):
    deltas, parsed = _feed_all(ToolStyle.HERMES, reply, step)
    assert [c.name for c in parsed.tool_calls] == ["get_weather"] and parsed.finish_reason == "tool_calls"
    assert json.loads(parsed.tool_calls[0].arguments) == {"city": city}
    assert parsed.content == content
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == content


@pytest.mark.parametrize("step", [1, 3, 1000])
@pytest.mark.parametrize("reply", [
    "Here:\n```python\nprint({'name': 1})\n```\nDone.",
    'An example:\n```json\n{"name": "Ada", "age": 36}\n```\n',  # JSON with a name, shaped as no call
    '{"name": "Ada", "age": 36}',
    '```json\nnot json at all\n```',
    'text then {"name": "f", "arguments": {}}',  # bare JSON counts only at the start of the reply
])
def test_fences_and_json_that_are_not_calls_stay_text(reply, step):
    deltas, parsed = _feed_all(ToolStyle.HERMES, reply, step)
    assert parsed.tool_calls == [] and parsed.content == reply.lstrip()
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == parsed.content


@pytest.mark.parametrize("step", [1, 4, 1000])
@pytest.mark.parametrize("style, reply", [
    (ToolStyle.HERMES, '{"name": "get_weather", "arguments": {"city'),
    (ToolStyle.HERMES, '```json\n{\n  "name": "get_weather",\n'),
    (ToolStyle.HERMES, 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"ci'),
    (ToolStyle.GENERIC, '{"tool_calls": [{"name": "get_time", "arguments": {"city": "Ro'),
    (ToolStyle.GENERIC, '{"tool_call": {"name": "get_ti'),
])
def test_a_call_cut_by_the_reply_end_is_never_content(style, reply, step):
    deltas, parsed = _feed_all(style, reply, step)
    assert parsed.tool_calls == [] and "name" not in parsed.content and "{" not in parsed.content
    assert parsed.content == ("Checking.\n" if reply.startswith("Checking") else "")
    assert not any("{" in d.text for d in deltas if isinstance(d, ContentDelta))
