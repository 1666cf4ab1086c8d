"""The OpenAI-compatible API and /metrics, driven with the real ``openai`` client against real servers: the UI's
own (where ``/v1`` is mounted beside ``/chat``) and ``launcher.py serve --api-key`` on its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from app.service.ports import ephemeral_port
from support.api_greedy import assert_same_greedy_text, greedy, rows
from support.ui_server import ARTIFACTS, ROOT, _stop, app_url

openai = pytest.importorskip("openai")
gradio_client = pytest.importorskip("gradio_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ASK = [{"role": "user", "content": "Name three fruits."}]


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture(scope="module")
def base():
    url = app_url()
    deadline = time.monotonic() + 60  # the routes are mounted right after Gradio starts
    while _get(url + "v1/models")[0] != 200:
        assert time.monotonic() < deadline, "/v1/models never answered"
        time.sleep(0.2)
    return url


@pytest.fixture(scope="module")
def client(base):
    return openai.OpenAI(base_url=base + "v1", api_key="unused", max_retries=0, timeout=300)


def metrics(base: str) -> dict:
    """{sample name + sorted labels: value} from /metrics, parsed by prometheus_client's own parser."""
    status, body = _get(base + "metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
    return out


def grew(before: dict, after: dict, name: str, **labels) -> float:
    key = name + json.dumps({k: str(v) for k, v in labels.items()}, sort_keys=True)
    return after.get(key, 0.0) - before.get(key, 0.0)


def check_stats(stats: dict, timings: dict, usage) -> None:
    assert stats["completion_tokens"] == usage.completion_tokens == timings["predicted_n"]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens and usage.prompt_tokens > 0
    drafted, accepted = stats["total_draft_tokens_count"], stats["accepted_draft_tokens_count"]
    assert 0 <= accepted <= drafted and stats["rejected_draft_tokens_count"] == drafted - accepted
    assert stats["emitted_tokens"] == usage.completion_tokens  # no stop string cut this one short
    assert (timings["draft_n"], timings["draft_n_accepted"]) == (drafted, accepted)
    assert stats["tokens_per_second"] > 0 and timings["predicted_per_second"] == stats["tokens_per_second"]
    assert stats["time_to_first_token"] > 0 and timings["prompt_n"] + timings["cache_n"] == usage.prompt_tokens


def test_models_lists_the_loaded_pair_first(client):
    models = client.models.list().data
    assert models[0].id == "demo-smollm2" and models[0].model_extra["loaded"]
    assert models[0].model_extra["draft"].endswith(".gguf")
    assert not any(m.model_extra["loaded"] for m in models[1:])  # the other installed pairs


def test_chat_equals_the_chat_endpoint_streamed_and_not(base, client):
    ref = gradio_client.Client(base, verbose=False).predict(
        ASK[0]["content"], [], {"temperature": 0, "max_tokens": 24}, api_name="/chat")
    reply = greedy(client.chat.completions.create, model="demo-smollm2", messages=ASK, max_tokens=24)
    # both are speculative greedy runs whose auto K may batch differently: equal up to a near-tie (api_greedy)
    assert_same_greedy_text(ref["text"], reply, "the API against /chat")
    if reply.choices[0].message.content == ref["text"]:
        assert reply.usage.completion_tokens == ref["n_tokens"]
    check_stats(reply.model_extra["stats"], reply.model_extra["timings"], reply.usage)

    chunks = list(greedy(client.chat.completions.create, model="demo-smollm2", messages=ASK, max_tokens=24,
                         stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(r.token for r in rows(chunks))
    assert_same_greedy_text(ref["text"], chunks, "streamed against /chat")
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == reply.choices[0].finish_reason
    last = chunks[-1]
    assert not last.choices and last.usage.completion_tokens == reply.usage.completion_tokens
    assert finish[0].model_extra["stats"]["accepted_draft_tokens_count"] >= 0
    check_stats(last.model_extra["stats"], last.model_extra["timings"], last.usage)


def test_completions_with_speculative_settings_and_stop(client):
    plain = greedy(client.completions.create, model="demo-smollm2", prompt="def add(a, b):", max_tokens=12,
                   extra_body={"speculative": False})
    stats = plain.model_extra["stats"]
    assert stats["speculative"] is False and "total_draft_tokens_count" not in stats
    assert plain.model_extra["timings"]["draft_n"] == 0
    spec = greedy(client.completions.create, model="demo-smollm2", prompt="def add(a, b):", max_tokens=12,
                  extra_body={"k": 3, "proposer": "draft", "p_min": 0.0})
    # greedy speculation reproduces the target's output: its own choices, and plain's up to a near-tie
    assert_same_greedy_text(plain.choices[0].text, spec, "speculative against plain")
    assert spec.model_extra["stats"]["total_draft_tokens_count"] > 0
    cut = spec.choices[0].text[3:6]
    stopped = client.completions.create(model="demo-smollm2", prompt="def add(a, b):", temperature=0, max_tokens=12,
                                        stop=[cut])
    assert stopped.choices[0].text == spec.choices[0].text[:spec.choices[0].text.index(cut)]
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.model_extra["stats"]["stop_reason"] == "stopStringFound"
    assert 0 < stopped.usage.completion_tokens <= spec.usage.completion_tokens


def test_sampling_with_a_seed_repeats(client):
    # a seed repeats the text for a fixed K; auto K chooses K from timings, so at T > 0 a seed repeats the
    # distribution, not the sample path
    kw = dict(model="demo-smollm2", messages=ASK, temperature=0.9, top_p=0.95, seed=7, max_tokens=12,
              extra_body={"k": 4})
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_bad_requests_get_openai_errors(base, client):
    # a misspelt field is ignored, as other servers do, and named in the header (test_api_lenient.py)
    raw = client.chat.completions.with_raw_response.create(model="demo-smollm2", messages=ASK, max_tokens=2,
                                                           extra_body={"temprature": 0})
    assert raw.headers["x-tandem-ignored"] == "temprature"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="demo-smollm2", messages=ASK, extra_body={"k": "many"})
    assert err.value.status_code == 400
    body = err.value.response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"} and body["param"] == "k"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="demo-smollm2", prompt="word " * 6000, max_tokens=4)
    body = err.value.response.json()["error"]
    assert body["code"] == "context_length_exceeded" and "context" in body["message"]
    req = urllib.request.Request(base + "v1/chat/completions", data=b"{not json",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(req, timeout=30)
    assert http.value.code == 400 and "error" in json.loads(http.value.read())
    assert client.chat.completions.create(model="demo-smollm2", messages=ASK, max_tokens=2).choices  # still serving


def test_a_client_that_disconnects_mid_stream_frees_the_queue(base, client):
    before = metrics(base)
    stream = client.completions.create(model="demo-smollm2", prompt="1, 2, 3, 4, 5,", temperature=0, max_tokens=1500,
                                       stream=True)
    got = 0
    for chunk in stream:
        got += len(chunk.choices[0].text) if chunk.choices else 0
        if got > 10:
            break
    stream.close()  # hang up mid-stream
    t0 = time.monotonic()
    nxt = client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, max_tokens=8)
    assert nxt.choices[0].message.content
    after = metrics(base)
    # the hung-up generation stopped early: far fewer tokens than its 1500 were generated in all
    assert grew(before, after, "tandem_emitted_tokens_total") < 300, time.monotonic() - t0
    assert after["tandem_queue_length{}"] == 0 and after["tandem_generation_running{}"] == 0


def test_waiting_requests_are_served_in_order(base, client):
    long = client.completions.create(model="demo-smollm2", prompt="1, 2, 3, 4, 5,", temperature=0, max_tokens=1500,
                                     stream=True)
    next(iter(long))  # it holds the pair now
    done: list[int] = []

    def short(i: int) -> None:
        client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, max_tokens=3)
        done.append(i)

    waiters = []
    for i in range(3):
        waiters.append(threading.Thread(target=short, args=(i,)))
        waiters[-1].start()
        deadline = time.monotonic() + 60
        while metrics(base)["tandem_queue_length{}"] < i + 1:  # queued before the next one asks
            assert time.monotonic() < deadline, "the request never queued"
            time.sleep(0.05)
    long.close()  # hanging up lets the queue move on
    for t in waiters:
        t.join(timeout=300)
    assert done == [0, 1, 2]


def test_metrics_parse_and_grow_by_what_a_request_did(base, client):
    before = metrics(base)
    reply = client.chat.completions.create(model="demo-smollm2", messages=ASK, temperature=0, max_tokens=16)
    after = metrics(base)
    stats = reply.model_extra["stats"]
    assert grew(before, after, "tandem_emitted_tokens_total") == reply.usage.completion_tokens
    for name, key, lookup in (("tandem_draft_tokens_total", "total_draft_tokens_count", "lookup_draft_tokens_count"),
                              ("tandem_accepted_tokens_total", "accepted_draft_tokens_count",
                               "lookup_accepted_tokens_count")):  # by drafter
        assert grew(before, after, name, drafter="lookup") == stats[lookup]
        assert grew(before, after, name, drafter="draft") + stats[lookup] == stats[key]
    assert grew(before, after, "tandem_target_passes_total") == stats["target_passes"]
    assert grew(before, after, "tandem_prompt_tokens_total") == reply.usage.prompt_tokens
    assert grew(before, after, "tandem_requests_total", endpoint="chat.completions", status=200) == 1
    assert grew(before, after, "tandem_generations_total", mode="speculative") == 1
    per_pos = grew(before, after, "tandem_accepted_tokens_per_pos_total", position=0)
    assert 0 <= per_pos <= grew(before, after, "tandem_draft_tokens_per_pos_total", position=0)
    assert after["tandem_tokens_per_second{}"] > 0
    assert after['tandem_draft_info{"draft": "SmolLM2-135M-Instruct.Q4_1.gguf", "kind": "draft model"}'] == 1


# --- launcher.py serve: the API alone, with a key ------------------------------------------------------------

KEY = "test-key-123"


@pytest.fixture(scope="module")
def served():
    port = ephemeral_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "api-server.log", "w")
    env = dict(os.environ, TANDEM_QUIET="1")
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "serve", "--port", str(port),
                             "--api-key", KEY], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (ARTIFACTS / "api-server.log").read_text()
            try:
                if _get(url + "v1/models")[0] == 401:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "launcher.py serve did not answer"
            time.sleep(0.3)
        yield url
    finally:
        _stop(proc, log)


def test_serve_needs_the_key_on_every_route(served):
    for path in ("v1/models", "metrics"):
        status, body = _get(served + path)
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    bad = openai.OpenAI(base_url=served + "v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="demo-smollm2", messages=ASK, max_tokens=2)
    good = openai.OpenAI(base_url=served + "v1", api_key=KEY, max_retries=0, timeout=120)
    assert good.models.list().data[0].id == "demo-smollm2"
    out = good.completions.create(model="demo-smollm2", prompt="The sky is", temperature=0, max_tokens=4)
    assert out.usage.completion_tokens == 4 and out.choices[0].finish_reason == "length"
    assert _get(served + "metrics", KEY)[0] == 200


def test_serve_refuses_other_hosts_without_a_key():
    out = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "serve", "--host", "0.0.0.0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--api-key" in out.stderr + out.stdout


def test_lookup_copies_an_earlier_reply_only_when_asked_and_says_how_many_tokens(client):
    """The same question twice: by default lookup searches this request's text alone; with ``lookup_memory:
    "pair"`` it may copy the first reply, and ``stats`` / ``timings`` count those tokens apart."""
    ask = [{"role": "user", "content": "Write a Python function that says whether a number is prime."}]

    def earlier(memory: str) -> tuple[int, int]:
        reply = client.chat.completions.create(
            model="demo-smollm2", messages=ask, temperature=0, max_tokens=48,
            extra_body={"proposer": "auto", "k": 12, "lookup_memory": memory})
        extra = reply.model_extra
        return extra["stats"]["lookup_earlier_tokens_count"], extra["timings"]["draft_lookup_n_earlier"]

    earlier("pair")  # the first time
    assert earlier("conversation") == (0, 0)
    copied, timed = earlier("pair")
    assert copied == timed >= 12  # much of the reply came from the first one's text (greedy: the same reply)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="demo-smollm2", messages=ask, max_tokens=4,
                                       extra_body={"lookup_memory": "forever"})
    assert err.value.body["param"] == "lookup_memory"
