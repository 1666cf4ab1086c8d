"""Benchmarks' length controls and the prompt cache through the API, with the real ``openai`` client (issue #50
item 12): llama.cpp's ``ignore_eos`` runs to ``max_tokens`` past the model's end, vLLM's ``min_tokens`` holds the
end off until that many tokens (speculation on and off, chat and legacy completions), both refused with a
grammar; ``usage.prompt_tokens_details.cached_tokens`` says how much of the prompt the KV cache already held."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

ASK = [{"role": "user", "content": "Say hi."}]


def _chat(client, **kw):
    return client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, **kw)


@pytest.mark.parametrize("speculative", [True, False])
def test_ignore_eos_and_min_tokens_on_chat(api, speculative):
    client = api.client()
    spec = {"speculative": speculative}
    plain = _chat(client, max_tokens=120, extra_body=spec)
    natural = plain.usage.completion_tokens
    assert plain.choices[0].finish_reason == "stop" and natural < 40  # the model ends early by itself
    forced = _chat(client, max_tokens=48, extra_body={**spec, "ignore_eos": True})
    assert forced.choices[0].finish_reason == "length" and forced.usage.completion_tokens == 48
    assert forced.choices[0].message.content.startswith(plain.choices[0].message.content)
    held = _chat(client, max_tokens=120, extra_body={**spec, "min_tokens": natural + 10})
    assert held.usage.completion_tokens >= natural + 10
    assert held.choices[0].message.content.startswith(plain.choices[0].message.content)
    free = _chat(client, max_tokens=120, extra_body={**spec, "min_tokens": 1})  # already met: nothing changes
    assert free.choices[0].message.content == plain.choices[0].message.content


def test_ignore_eos_on_completions(api):
    client = api.client()
    prompt = "The capital of France is Paris.<|im_end|>"
    out = client.completions.create(model="demo-smollm2", prompt=prompt, max_tokens=32, temperature=0.7, seed=3,
                                    extra_body={"ignore_eos": True})
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 32
    held = client.completions.create(model="demo-smollm2", prompt=prompt, max_tokens=64, temperature=0, stream=True,
                                     stream_options={"include_usage": True}, extra_body={"min_tokens": 20})
    chunks = list(held)
    assert chunks[-1].usage.completion_tokens >= 20


@pytest.mark.parametrize("extra, param", [
    ({"min_tokens": 50, "max_tokens": 10}, "min_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"ignore_eos": True, "response_format": {"type": "json_object"}}, "ignore_eos"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
])
def test_bad_length_controls_are_400s_naming_the_field(api, extra, param):
    client = api.client()
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="demo-smollm2", messages=ASK, **({"max_tokens": extra.pop("max_tokens")}
                                                                  if "max_tokens" in extra else {}),
                                       extra_body=extra)
    assert err.value.body["param"] == param


def test_cached_tokens_are_reported(api):
    client = api.client()
    ask = [{"role": "user", "content": "List three colours of the rainbow, one per line, no more."}]
    first = client.chat.completions.create(model="demo-smollm2", messages=ask, temperature=0, max_tokens=8)
    again = client.chat.completions.create(model="demo-smollm2", messages=ask, temperature=0, max_tokens=8)
    details = again.usage.prompt_tokens_details
    assert details is not None and 0 < details.cached_tokens < again.usage.prompt_tokens
    assert details.cached_tokens == again.model_extra["timings"]["cache_n"]
    assert first.usage.prompt_tokens_details.cached_tokens == first.model_extra["timings"]["cache_n"]
    streamed = list(client.chat.completions.create(model="demo-smollm2", messages=ask, temperature=0, max_tokens=8,
                                                   stream=True, stream_options={"include_usage": True}))
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens > 0
