"""Structured output and logprobs through the API, with the real ``openai`` client (#23 items 2 and 3):
``response_format`` (json_object, json_schema) and llama.cpp's ``grammar`` / ``json_schema`` fields; output that
validates with speculation on and off and is equal at T = 0 (up to near-ties, support.api_greedy); logprobs of greedy tokens equal the target's
log-softmax, computed here with a plain pass through the engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.engine.decoding.logprobs import log_softmax

from support.api_greedy import assert_same_masked, greedy
from support.schema_check import validate

openai = pytest.importorskip("openai")

CAT = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "colour": {"type": "string", "enum": ["black", "white", "ginger", "grey"]}},
    "required": ["name", "age", "colour"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Describe a cat as JSON with its name, age and colour."}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT, "strict": True}}


def test_json_schema_validates_and_speculation_changes_nothing_at_t0(api):
    client = api.client()
    texts, replies = [], []
    for extra in ({"speculative": False}, {"k": 4}, {"k": "auto"}):
        out = greedy(client.chat.completions.create, top=5, model="demo-smollm2", messages=ASK, max_tokens=120,
                     response_format=FORMAT, extra_body=extra)
        assert out.choices[0].finish_reason == "stop"
        validate(json.loads(out.choices[0].message.content), CAT)
        texts.append(out.choices[0].message.content)
        replies.append(out)
    for spec in replies[1:]:  # equal to plain, up to a near-tie among the tokens the grammar allowed
        assert_same_masked(replies[0], spec, "speculative against plain under a schema")
    streamed = client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, max_tokens=120,
                                              response_format=FORMAT, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) in texts


def test_json_object_and_the_llamacpp_fields(api):
    client = api.client()
    out = client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, max_tokens=80,
                                         response_format={"type": "json_object"})
    assert isinstance(json.loads(out.choices[0].message.content), dict)
    out = client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, max_tokens=80,
                                         extra_body={"json_schema": CAT})
    validate(json.loads(out.choices[0].message.content), CAT)
    out = client.completions.create(model="demo-smollm2", prompt="Is the sky blue? Answer:", temperature=0,
                                    max_tokens=8, extra_body={"grammar": 'root ::= " yes" | " no"'})
    assert out.choices[0].text in (" yes", " no")


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}},
     "response_format.json_schema.schema"),
    ({"grammar": "root ::= ", "json_schema": CAT}, "json_schema"),
    ({"grammar": "root ::= [unclosed"}, "grammar"),
])
def test_bad_formats_are_400s_naming_the_field(api, body, param):
    with pytest.raises(openai.BadRequestError) as err:
        api.client().chat.completions.create(model="demo-smollm2", messages=ASK, max_tokens=4, extra_body=body)
    assert err.value.body["param"] == param, err.value.body


def _reference(api, prompt: list[int], n: int) -> list[np.ndarray]:
    """The target's log-softmax at each greedy position, by a plain pass (no draft)."""
    target, history, out = api.state.pair.target, list(prompt), []
    with api.state.generation_lock:
        for _ in range(n):
            target.rollback(0)
            ref = log_softmax(target.sync(history))
            out.append(ref)
            history.append(int(np.argmax(ref)))
    return out


def test_chat_logprobs_of_greedy_tokens_are_the_targets_log_softmax(api):
    ask = [{"role": "user", "content": "Count from one to ten in words."}]
    out = api.client().chat.completions.create(model="demo-smollm2", messages=ask, temperature=0, max_tokens=16,
                                             logprobs=True, top_logprobs=5, extra_body={"k": 4})
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens == 16
    assert out.model_extra["stats"]["accepted_draft_tokens_count"] > 0, "nothing drafted: the test proves little"
    target = api.state.pair.target
    refs = _reference(api, api.state.pair.chat_prompt(ask), len(content))
    for entry, ref in zip(content, refs):
        best = int(np.argmax(ref))
        assert bytes(entry.bytes) == target.piece(best)
        assert entry.logprob == pytest.approx(float(ref[best]), abs=2e-3)
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(np.sort(ref)[::-1][:5], abs=2e-3)
        assert entry.top_logprobs[0].token == entry.token
    assert "".join(e.token for e in content) == out.choices[0].message.content


def test_completion_logprobs_in_the_legacy_format(api):
    client = api.client()
    out = client.completions.create(model="demo-smollm2", prompt="One, two, three,", temperature=0, max_tokens=6,
                                    logprobs=3)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == out.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)]
    assert all(len(top) <= 3 and max(top.values()) == pytest.approx(v, abs=1e-4)
               for top, v in zip(lp.top_logprobs, lp.token_logprobs))
    streamed = client.completions.create(model="demo-smollm2", prompt="One, two, three,", temperature=0, max_tokens=6,
                                         logprobs=3, stream=True)
    tokens = [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert tokens == lp.tokens
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="demo-smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       logprobs=True, top_logprobs=21)
