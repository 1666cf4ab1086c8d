"""Qwen2.5-Coder's tool calls with ``tool_choice: "auto"`` through the API, with the real ``openai`` client and
LangChain (issue #50 item 10): the model writes its call as bare JSON or a fenced ```` ```json ```` block instead of
``<tool_call>``; both come back as ``tool_calls`` (streamed and not), and a call cut by ``max_tokens`` never
lands in ``content`` as raw JSON."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city.",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}
# what the 0.5B model answers at T = 0: bare JSON for the first, a fenced block for the second (checked below)
ASKS = {"bare": ("What is the weather in Paris right now?", "Paris"),
        "fenced": ("Use the tool: weather in Tokyo?", "Tokyo")}


@pytest.fixture(scope="module")
def qwen(coder_pair):
    from support.api_inproc import Served

    served = Served(coder_pair, pair_id="qwen25-coder-05b")
    yield served
    served.close()


def _ask(text: str) -> list:
    return [{"role": "user", "content": text}]


def _streamed(client, **kw) -> tuple[str, dict, list]:
    content, calls, finishes = "", {}, []
    for c in client.chat.completions.create(stream=True, **kw):
        if not c.choices:
            continue
        delta = c.choices[0].delta
        content += delta.content or ""
        for d in delta.tool_calls or []:
            slot = calls.setdefault(d.index, {"name": "", "arguments": ""})
            slot["name"] += (d.function.name or "") if d.function else ""
            slot["arguments"] += (d.function.arguments or "") if d.function else ""
        finishes.append(c.choices[0].finish_reason)
    return content, calls, [f for f in finishes if f]


@pytest.mark.parametrize("form", ["bare", "fenced"])
def test_auto_tool_calls_come_back_as_tool_calls(qwen, form):
    client = qwen.client()
    ask, city = ASKS[form]
    kw = dict(model="qwen25-coder-05b", messages=_ask(ask), tools=[WEATHER], tool_choice="auto", temperature=0,
              max_tokens=120)
    out = client.chat.completions.create(**kw)
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls", msg
    assert not msg.content and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": city}
    content, calls, finishes = _streamed(client, **kw)
    assert content == "" and finishes == ["tool_calls"]
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": city}


@pytest.mark.parametrize("form", ["bare", "fenced"])
def test_a_call_cut_by_max_tokens_never_leaks_into_content(qwen, form):
    client = qwen.client()
    kw = dict(model="qwen25-coder-05b", messages=_ask(ASKS[form][0]), tools=[WEATHER], tool_choice="auto",
              temperature=0, max_tokens=12)
    out = client.chat.completions.create(**kw)
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "length"
    assert not msg.tool_calls and not msg.content, msg
    content, calls, finishes = _streamed(client, **kw)
    assert content == "" and not calls and finishes == ["length"]


def test_langchain_sees_the_call(qwen):
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return "sunny"

    llm = lc.ChatOpenAI(base_url=qwen.url + "v1", api_key="unused", model="qwen25-coder-05b", temperature=0,
                        max_tokens=120, max_retries=0)
    for ask, city in ASKS.values():
        reply = llm.bind_tools([get_weather]).invoke(ask)
        assert [c["name"] for c in reply.tool_calls] == ["get_weather"], reply
        assert reply.tool_calls[0]["args"] == {"city": city}
