"""Tool calls and seeds through the API, with the real ``openai`` client (#23 items 1 and 4): a forced call
returns ``tool_calls`` whose arguments validate against the tool's schema, streamed and not; a tool result goes
back in and the model answers; with a ``seed`` at T = 0.8 the text is the same with speculation off, K = 4 and
auto K (the coupled rule)."""

from __future__ import annotations

import json

import pytest

from support.schema_check import validate

openai = pytest.importorskip("openai")

PARAMS = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city.",
                                             "parameters": PARAMS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time in a city.",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_validates_streamed_and_not(api, choice):
    client = api.client()
    out = client.chat.completions.create(model="demo-smollm2", messages=ASK, tools=[WEATHER, TIME], tool_choice=choice,
                                         temperature=0, max_tokens=120, parallel_tool_calls=False)
    choice0 = out.choices[0]
    assert choice0.finish_reason == "tool_calls" and choice0.message.tool_calls
    call = choice0.message.tool_calls[0]
    if isinstance(choice, dict):
        assert call.function.name == "get_weather"
    schema = PARAMS if call.function.name == "get_weather" else TIME["function"]["parameters"]
    validate(json.loads(call.function.arguments), schema)
    assert call.id and call.type == "function"

    chunks = list(client.chat.completions.create(model="demo-smollm2", messages=ASK, tools=[WEATHER, TIME],
                                                 tool_choice=choice, temperature=0, max_tokens=120,
                                                 parallel_tool_calls=False, stream=True))
    calls: dict = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = slot["id"] or d.id
            slot["name"] += (d.function.name or "") if d.function else ""
            slot["arguments"] += (d.function.arguments or "") if d.function else ""
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert calls[0]["name"] == call.function.name and calls[0]["id"]
    assert json.loads(calls[0]["arguments"]) == json.loads(call.function.arguments)


def test_a_tool_result_round_trip(api):
    client = api.client()
    first = client.chat.completions.create(model="demo-smollm2", messages=ASK, tools=[WEATHER], tool_choice="required",
                                           temperature=0, max_tokens=120)
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                     {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21, "sky": "clear"}'}]
    reply = client.chat.completions.create(model="demo-smollm2", messages=history, tools=[WEATHER], tool_choice="none",
                                           temperature=0, max_tokens=40)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls
    auto = client.chat.completions.create(model="demo-smollm2", messages=history, tools=[WEATHER], temperature=0,
                                          max_tokens=60)
    assert auto.choices[0].message.content or auto.choices[0].message.tool_calls


def test_bad_tools_are_400s(api):
    client = api.client()
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="demo-smollm2", messages=ASK, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert err.value.body["param"] == "tools"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="demo-smollm2", messages=ASK, tools=[{"type": "function", "function": {}}])


def test_a_seed_holds_whatever_the_speculation(api):
    client = api.client()
    ask = [{"role": "user", "content": "Tell me a short story about a fox."}]
    for seed in range(10):
        texts = []
        for extra in ({"speculative": False}, {"k": 4}, {"k": "auto"}):
            out = client.chat.completions.create(model="demo-smollm2", messages=ask, temperature=0.8, max_tokens=24,
                                                 seed=seed, extra_body=extra)
            texts.append(out.choices[0].message.content)
        assert texts[0] == texts[1] == texts[2], (seed, texts)
