"""``POST /infill`` (llama.cpp's shapes) and ``/v1/completions`` with a suffix, served in-process over the real
Qwen2.5-Coder-0.5B (its vocabulary has FIM tokens; no draft model, so speculation is prompt lookup).

Found with the 0.5B: in the repo-level layout that llama.cpp (and so /infill) sends for Qwen, it fills the middle
well where the context shows the way (a helper in ``input_extra``, a short function) and then runs on (a code
fence, the next function); ``n_indent`` ends it where an editor would. Asked in the plain layout
(``<|fim_prefix|>…<|fim_middle|>`` written in a /v1/completions prompt) it stops at its end-of-generation token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from support.api_greedy import assert_same_greedy_text, greedy

CUBE = {"input_prefix": "def square(x):\n    return x * x\n\n\ndef cube(x):\n", "input_suffix": "\n",
        "input_extra": [{"filename": "util.py", "text": "def cube(x):\n    return x * x * x\n"}]}
FIELDS = ("index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted", "tokens_evaluated",
          "generation_settings", "prompt", "has_new_line", "truncated", "stop_type", "stopping_word", "tokens_cached",
          "timings")


@pytest.fixture(scope="module")
def coder_api(coder_pair):
    from support.api_inproc import Served

    served = Served(coder_pair, pair_id="coder")
    yield served
    served.close()


def post(served, body, path: str = "infill", headers: dict | None = None) -> tuple[int, dict, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(served.url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def infill(served, **body) -> dict:
    status, _, raw = post(served, {"temperature": 0, **body})
    assert status == 200, raw
    return json.loads(raw)


def events(raw: bytes) -> list[dict]:
    blocks = [b for b in raw.decode().split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") for b in blocks), blocks
    return [json.loads(b[len("data: "):]) for b in blocks]


def test_a_middle_in_llamacpps_shape_with_the_editors_own_rules(coder_api):
    """The helper in input_extra shows the way; n_indent (llama.vim's) cuts the code fence the 0.5B adds."""
    status, headers, raw = post(coder_api, {**CUBE, "n_predict": 16, "n_indent": 4, "temperature": 0,
                                            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True})
    assert status == 200, raw
    res = json.loads(raw)
    assert set(FIELDS) <= set(res) and res["stop"] is True and res["model"] == "coder"
    assert res["content"] == "    return x * x * x\n" and res["stop_type"] == "limit" and res["has_new_line"]
    assert "<|fim_prefix|>" in res["prompt"] and "<|file_sep|>util.py" in res["prompt"]
    assert res["tokens"] == [] and res["truncated"] is False and res["generation_settings"]["n_indent"] == 4
    t = res["timings"]
    assert t["prompt_n"] + t["cache_n"] == res["tokens_evaluated"] and t["predicted_n"] == res["tokens_predicted"]
    assert t["draft_lookup_n"] > 0  # prompt lookup read the extra chunk (the prompt)
    assert headers["x-tandem-ignored"] == "samplers, cache_prompt"


def test_streamed_as_llamacpp_streams_it(coder_api):
    body = {**CUBE, "n_predict": 12, "n_indent": 4, "return_tokens": True}
    whole = infill(coder_api, **body)
    status, headers, raw = post(coder_api, {**body, "temperature": 0, "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert b"[DONE]" not in raw  # llama.cpp ends a non-OpenAI stream without it
    chunks = events(raw)
    *parts, final = chunks
    assert parts and all(c["stop"] is False for c in parts) and all(c["content"] for c in parts[:-1])
    assert set(parts[0]) >= {"index", "content", "tokens", "stop", "id_slot", "tokens_predicted", "tokens_evaluated"}
    assert "timings" in parts[-1] and final["stop"] is True and final["content"] == "" and final["tokens"] == []
    assert "".join(c["content"] for c in parts) == whole["content"]
    assert len(whole["tokens"]) == whole["tokens_predicted"]
    assert final["stop_type"] == whole["stop_type"] and final["timings"]["predicted_n"] == whole["tokens_predicted"]


def test_stop_strings_and_the_time_limit(coder_api):
    res = infill(coder_api, **CUBE, n_predict=16, stop=["* x\n"])
    assert res["content"] == "    return x * x " and res["stop_type"] == "word" and res["stopping_word"] == "* x\n"
    res = infill(coder_api, input_prefix="def add(a, b):\n    return ", input_suffix="\n", n_predict=16,
                 t_max_predict_ms=1)
    first, _, rest = res["content"].partition("\n")
    assert first == "a + b" and not rest.strip() and res["stop_type"] == "limit"  # at the first newline


def test_a_warm_up_fills_the_cache_and_the_next_request_reuses_it(coder_api):
    lines = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
    body = {"input_prefix": lines + "def g(x):\n    return x", "input_suffix": "\n", "n_predict": 0}
    warm = infill(coder_api, **body)
    n = warm["tokens_evaluated"]
    assert warm["content"] == "" and warm["tokens_predicted"] == 0 and warm["stop_type"] == "limit"
    assert warm["tokens_cached"] == n - 1 and warm["timings"]["prompt_n"] + warm["timings"]["cache_n"] == n
    res = infill(coder_api, **{**body, "input_prefix": body["input_prefix"] + " *", "n_predict": 3})
    assert res["timings"]["cache_n"] >= 0.9 * n  # only what follows the edit was read again
    assert res["timings"]["cache_n"] + res["timings"]["prompt_n"] == res["tokens_evaluated"]


def test_response_fields_pick_and_unnest(coder_api):
    res = infill(coder_api, **CUBE, n_predict=2,
                 response_fields=["content", "timings/cache_n", "generation_settings/n_predict", "nothing/here"])
    assert set(res) == {"content", "timings/cache_n", "generation_settings/n_predict"}
    assert res["generation_settings/n_predict"] == 2


@pytest.mark.parametrize("body, message", [
    ({"input_suffix": ""}, '"input_prefix" is required'),
    ({"input_prefix": ""}, '"input_suffix" is required'),
    ({"input_prefix": "", "input_suffix": "", "input_extra": {"text": "x"}},
     '"input_extra" must be an array of {"filename": string, "text": string}'),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a.py"}]},
     'extra_context chunk must contain a "text" field with a string value'),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"text": "x", "filename": 3}]},
     'extra_context chunk\'s "filename" field must be a string'),
    ({"input_prefix": "", "input_suffix": "", "prompt": ["x"]}, '"prompt" must be a string'),
    ({"input_prefix": "", "input_suffix": "", "n_predict": -2}, "Value must be between -1"),
])
def test_bad_input_gets_llamacpps_message(coder_api, body, message):
    status, _, raw = post(coder_api, body)
    assert status == 400 and message in json.loads(raw)["error"]["message"]


def test_the_guard_and_the_routes(coder_api):
    body = {"input_prefix": "x", "input_suffix": "", "n_predict": 1}
    status, _, raw = post(coder_api, body, headers={"Origin": "http://evil.example"})
    assert status == 403, raw
    status, _, raw = post(coder_api, body, headers={"Host": "evil.example"})
    assert status == 403, raw
    status, headers, _ = coder_api.get("/infill")
    assert status == 405 and headers["allow"] == "POST"


def test_a_model_without_fim_tokens_is_refused_with_501(api):
    status, _, raw = post(api, {"input_prefix": "def f(", "input_suffix": ")\n"})
    err = json.loads(raw)["error"]
    assert status == 501 and "infill is not supported" in err["message"] and "prefix, suffix, middle" in err["message"]
    status, _, raw = post(api, {"prompt": "def f(", "suffix": ")\n", "max_tokens": 1}, path="v1/completions")
    assert status == 501, raw


def test_completions_with_a_suffix_and_with_fim_tokens_in_the_prompt(coder_api):
    client = coder_api.client()
    written = client.completions.create(model="coder", max_tokens=12, temperature=0,
                                        prompt="<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\n"
                                               "print(add(1, 2))\n<|fim_middle|>")
    assert written.choices[0].text.startswith("a + b")  # the FIM tokens were read as tokens: a middle
    assert written.usage.prompt_tokens < 25
    kw = dict(model="coder", prompt="def add(a, b):\n    return ", suffix="\n", max_tokens=16)
    plain = greedy(client.completions.create, **kw, extra_body={"speculative": False})
    assert plain.choices[0].text.startswith("a + b\n")
    spec = greedy(client.completions.create, **kw, extra_body={"proposer": "lookup", "k": 4})
    assert_same_greedy_text(plain.choices[0].text, spec, "lookup against plain, FIM")
    assert spec.model_extra["stats"]["total_draft_tokens_count"] > 0
