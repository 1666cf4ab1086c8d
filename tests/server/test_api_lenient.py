"""Lenient like its peers (#23 item 5), with the real ``openai`` client: unknown fields are ignored and named
in ``x-tandem-ignored``; ``/v1/models/{id}``, ``/health`` and OpenAI-format 404 / 405 bodies; ``timings``
count only the prompt tokens processed; a stream's first chunk carries the role alone; two assistant turns in a
row are refused."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

ASK = [{"role": "user", "content": "Name three fruits."}]


def test_unknown_fields_are_ignored_and_named(api):
    client = api.client()
    raw = client.chat.completions.with_raw_response.create(
        model="demo-smollm2", messages=ASK, max_tokens=3, temperature=0, metadata={"a": "b"}, store=False,
        extra_body={"cache_prompt": True, "return_token_ids": True, "dry_multiplier": 0.0})
    assert raw.http_response.status_code == 200
    named = set(raw.headers["x-tandem-ignored"].split(", "))
    assert {"metadata", "store", "cache_prompt", "return_token_ids", "dry_multiplier"} <= named
    assert raw.parse().choices[0].message.content
    out = client.chat.completions.with_raw_response.create(model="demo-smollm2", messages=ASK, max_tokens=2,
                                                           temperature=0)
    assert "x-tandem-ignored" not in out.headers  # nothing ignored, no header


def test_models_retrieve_and_health(api):
    client = api.client()
    assert client.models.retrieve("demo-smollm2").id == "demo-smollm2"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("no-such-model")
    assert err.value.body["code"] == "model_not_found"
    status, _, body = api.get("/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}


@pytest.mark.parametrize("path, method, status", [("/v1/nothing", "GET", 404), ("/v1/chat/completions", "GET", 405),
                                                  ("/nothing", "GET", 404), ("/v1/models", "DELETE", 405)])
def test_unknown_routes_and_methods_get_openai_errors(api, path, method, status):
    got, headers, body = api.get(path, method)
    assert got == status
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and error["code"]
    if status == 405:
        assert headers.get("Allow") or headers.get("allow")


def test_timings_count_only_processed_prompt_tokens(api):
    client = api.client()
    ask = [{"role": "user", "content": "Write one sentence about the moon and the sea."}]
    client.chat.completions.create(model="demo-smollm2", messages=ask, max_tokens=2, temperature=0)
    again = client.chat.completions.create(model="demo-smollm2", messages=ask, max_tokens=2, temperature=0)
    timings = again.model_extra["timings"]
    assert timings["cache_n"] > 0 and timings["prompt_n"] >= 1
    assert timings["cache_n"] + timings["prompt_n"] == again.usage.prompt_tokens


def test_first_stream_chunk_carries_the_role_alone(api):
    chunks = list(api.client().chat.completions.create(model="demo-smollm2", messages=ASK, max_tokens=4, temperature=0,
                                                       stream=True))
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and not first.content
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert all(c.choices[0].delta.role is None for c in chunks[1:] if c.choices)


def test_two_assistant_turns_in_a_row_are_refused(api):
    msgs = ASK + [{"role": "assistant", "content": "Apple."}, {"role": "assistant", "content": "Pear."}]
    with pytest.raises(openai.BadRequestError) as err:
        api.client().chat.completions.create(model="demo-smollm2", messages=msgs, max_tokens=2)
    assert err.value.body["param"] == "messages[2]"
