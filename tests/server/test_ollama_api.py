"""Ollama's API (issue #50 item 13) with the real ``ollama`` client from PyPI against the real server over the demo
pair: version, tags, ps, show, chat and generate streamed and not, options, ``format`` json and a schema, tool
calls in Ollama's shape, an unknown model (Ollama's 404), a request with nothing to generate (Ollama's way to
load a model), and the Guard's refusals (a forged Host, a key)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from support.schema_check import validate

ollama = pytest.importorskip("ollama")

ASK = [{"role": "user", "content": "Say hi."}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def client(api):
    return ollama.Client(host=api.url.rstrip("/"), timeout=300)


def _post(api, path: str, body: dict, headers: dict = ()) -> tuple[int, dict, bytes]:  # type: ignore[assignment]
    req = urllib.request.Request(api.url + path.lstrip("/"), data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **dict(headers)})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_version_tags_ps_and_show(api, client):
    status, _, body = api.get("/api/version")
    assert status == 200 and json.loads(body)["version"]
    tags = client.list()
    assert tags.models[0].model == "demo-smollm2:latest"  # the loaded pair first, then the other installed ones
    assert "demo-gemma3:latest" in [m.model for m in tags.models]
    entry = tags.models[0]
    assert entry.size > 0 and entry.digest and entry.modified_at is not None
    assert entry.details.format == "gguf" and entry.details.family == "llama"
    assert entry.details.quantization_level == "F32" and entry.details.parameter_size.endswith("M")
    assert [m.model for m in client.ps().models] == ["demo-smollm2:latest"]
    for name in ("demo-smollm2", "demo-smollm2:latest"):
        shown = client.show(name)
        assert "im_start" in shown.template and "completion" in shown.capabilities
        assert shown.modelinfo["general.architecture"] == "llama"
        assert shown.modelinfo["tandem.draft"] and shown.details.family == "llama"


def test_chat_streamed_and_not(api, client):
    whole = client.chat(model="demo-smollm2", messages=ASK, options={"temperature": 0, "num_predict": 24})
    assert whole.done and whole.done_reason in ("stop", "length") and whole.message.role == "assistant"
    assert whole.message.content and whole.eval_count and whole.eval_count <= 24
    assert whole.prompt_eval_count > 0 and whole.eval_duration > 0 and whole.total_duration >= whole.eval_duration
    parts = list(client.chat(model="demo-smollm2:latest", messages=ASK, stream=True,
                             options={"temperature": 0, "num_predict": 24}))
    # streamed: the text in pieces, then the final object (how many pieces depends on the machine's speed)
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and len(parts) >= 2
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count
    status, headers, raw = _post(api, "/api/chat", {"model": "demo-smollm2", "messages": ASK,
                                                    "options": {"temperature": 0, "num_predict": 8}})
    lines = [json.loads(line) for line in raw.decode().splitlines()]  # Ollama streams unless told not to
    assert status == 200 and headers["content-type"].startswith("application/x-ndjson") and len(lines) >= 2
    tandem = lines[-1]["tandem"]  # Tandem's speculative figures beside Ollama's
    assert tandem["stats"]["speculative"] and "draft_n" in tandem["timings"]


def test_generate_streamed_and_not_with_options(client):
    kw = dict(model="demo-smollm2", prompt="Name a fruit.", options={"temperature": 0, "num_predict": 16, "seed": 1})
    whole = client.generate(**kw)
    assert whole.done and whole.response and whole.eval_count <= 16
    parts = list(client.generate(stream=True, **kw))
    assert "".join(p.response for p in parts) == whole.response and parts[-1].done
    raw = client.generate(model="demo-smollm2", prompt="Once upon a time", raw=True,
                          options={"temperature": 0, "num_predict": 40, "stop": ["."]})
    assert "." not in raw.response and raw.done_reason == "stop"
    cut = client.generate(model="demo-smollm2", prompt="Count to fifty.", options={"num_predict": 5})
    assert cut.done_reason == "length" and cut.eval_count == 5


def test_format_json_and_a_schema(client):
    out = client.chat(model="demo-smollm2", messages=[{"role": "user", "content": "A fruit as JSON, one key."}],
                      format="json", options={"temperature": 0, "num_predict": 80})
    assert out.message.content.lstrip().startswith("{")  # (the grammar holds; the small model may run long)
    if out.done_reason == "stop":
        assert isinstance(json.loads(out.message.content), dict)
    out = client.generate(model="demo-smollm2", prompt="Ada is 36. Answer in JSON.", format=SCHEMA,
                          options={"temperature": 0, "num_predict": 80})
    validate(json.loads(out.response), SCHEMA)


def test_tool_calls_in_ollama_shape(client):
    def get_weather(city: str) -> str:
        """The current weather in a city.

        Args:
          city: The city's name
        """
        return "sunny"

    out = client.chat(model="demo-smollm2", messages=[{"role": "user", "content": "Weather in Paris?"}],
                      tools=[get_weather], options={"temperature": 0, "num_predict": 120})
    if out.message.tool_calls:  # the small model may also answer in words; a call must be whole and typed
        call = out.message.tool_calls[0]
        assert call.function.name == "get_weather" and isinstance(call.function.arguments, dict)
        history = [{"role": "user", "content": "Weather in Paris?"}, out.message,
                   {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"}]
        again = client.chat(model="demo-smollm2", messages=history, tools=[get_weather],
                            options={"temperature": 0, "num_predict": 60})
        assert again.done
    else:
        assert out.message.content


def test_unknown_model_empty_requests_and_errors(api, client):
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="llama3:8b", messages=ASK)
    assert err.value.status_code == 404 and err.value.error == "model 'llama3:8b' not found"
    with pytest.raises(ollama.ResponseError) as err:
        client.show("gpt-4o")
    assert err.value.status_code == 404
    loaded = client.generate(model="demo-smollm2")  # no prompt: Ollama's way to load a model
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
    assert client.chat(model="demo-smollm2", messages=[]).done_reason == "load"
    status, _, body = _post(api, "/api/chat", {"model": "demo-smollm2", "messages": ASK,
                                               "options": {"temperature": "hot"}})
    assert status == 400 and "options.temperature" in json.loads(body)["error"]
    status, _, body = _post(api, "/api/chat", {"messages": ASK})
    assert status == 400 and json.loads(body) == {"error": "model is required"}
    status, headers, _ = _post(api, "/api/generate", {"model": "demo-smollm2", "prompt": "Hi", "stream": False,
                                                      "keep_alive": "5m", "options": {"num_predict": 2,
                                                                                      "num_thread": 4}})
    assert status == 200 and headers["x-tandem-ignored"] == "keep_alive, options.num_thread"


def test_the_guard_refuses_a_forged_host(api):
    for path, body in (("/api/tags", None), ("/api/chat", {"model": "demo-smollm2", "messages": ASK})):
        req = urllib.request.Request(api.url + path.lstrip("/"), method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Host": "evil.example:11434", "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 403 and "evil.example" in json.loads(err.value.read())["error"]


def test_the_apps_own_server_answers_ollama_too():
    """The app (launcher.py, Gradio) mounts the same routes beside /v1: tags and a chat through the client, and its
    page guard lets a forged Host reach no route."""
    from support.ui_server import app_url

    url = app_url().rstrip("/")
    client = ollama.Client(host=url, timeout=300)
    assert client.list().models[0].model == "demo-smollm2:latest"  # the loaded pair first
    out = client.chat(model="demo-smollm2", messages=ASK, options={"temperature": 0, "num_predict": 8})
    assert out.done and out.message.content
    req = urllib.request.Request(url + "/api/tags", headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 403
