"""Model selection by name (issue #50 item 11) with the real ``openai`` and ``ollama`` clients against a real
server whose state starts with demo-smollm2 loaded: ``/v1/models`` lists every installed pair, the loaded one
first; a request naming demo-gemma3 loads it through the UI's loading path and is answered by it (the reply's
``model``); requests naming two pairs at once are each answered by their own; an unknown name is a 404
``model_not_found`` naming installed ids and loads nothing; Ollama's routes resolve names the same way."""

from __future__ import annotations

import threading

import openai
import pytest

from app.engine.pair import Pair
from app.testing import gpu_layers, load_options
from support.api_inproc import Served

ASK = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def served(smol_paths, gemma_paths):
    """A server of its own (its requests switch pairs; the session's pair stays untouched)."""
    pair = Pair.load(smol_paths[0], smol_paths[1], load_options(n_ctx=1024))
    api = Served(pair, pair_id="demo-smollm2")
    api.state.target_options = load_options(n_ctx=1024)  # what a switch loads the next pair with
    api.state.gpu_layers = (gpu_layers(), gpu_layers())
    yield api
    api.close()
    api.state.unload()  # whichever pair is loaded by now (a switch closed the others)


def _chat(client, model: str, **kw):
    return client.chat.completions.create(model=model, messages=ASK, max_tokens=8, temperature=0, **kw)


def test_listing_shows_every_installed_pair_the_loaded_one_first(served):
    client = served.client()
    models = client.models.list().data
    ids = [m.id for m in models]
    assert ids[0] == "demo-smollm2" and models[0].model_extra["loaded"] and "demo-gemma3" in ids
    gemma = client.models.retrieve("demo-gemma3")
    assert gemma.model_extra["loaded"] is False and gemma.model_extra["target"] == "gemma-3-270m.F32.gguf"
    assert client.models.retrieve("gemma-3-270m.F32.gguf").id == "demo-gemma3"  # the target's file name
    assert client.models.retrieve("smollm2-135m-instruct-f32").id == "demo-smollm2"  # the loaded target's id
    assert served.state.pair_id == "demo-smollm2"  # listing loads nothing


def test_an_unknown_model_is_a_404_naming_installed_ids(served):
    client = served.client()
    for stream in (False, True):
        with pytest.raises(openai.NotFoundError) as err:
            _chat(client, "gpt-4o-does-not-exist", stream=stream)
        body = err.value.body
        assert body["code"] == "model_not_found" and body["param"] == "model"
        assert "gpt-4o-does-not-exist" in body["message"] and "demo-smollm2" in body["message"]
    assert served.state.pair_id == "demo-smollm2"
    assert _chat(client, "").model == "demo-smollm2"  # no preference: the loaded pair


def test_a_request_naming_another_pair_loads_it_and_is_answered_by_it(served):
    client = served.client()
    reply = _chat(client, "demo-gemma3")
    assert reply.model == "demo-gemma3" and reply.choices[0].message.content
    assert served.state.pair_id == "demo-gemma3" and served.state.pair.target.path.name == "gemma-3-270m.F32.gguf"
    assert client.models.list().data[0].id == "demo-gemma3"
    chunks = list(_chat(client, "SmolLM2-135M-Instruct.F32.gguf", stream=True))  # back, by file name, streamed
    assert {c.model for c in chunks} == {"demo-smollm2"} and "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert served.state.pair_id == "demo-smollm2"


def test_requests_naming_two_pairs_at_once_are_each_answered_by_their_own(served):
    client = served.client()
    got: dict = {}

    def ask(name: str) -> None:
        got[name] = _chat(client, name).model

    names = ("demo-gemma3", "demo-smollm2", "demo-gemma3:latest")
    threads = [threading.Thread(target=ask, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert got == {"demo-gemma3": "demo-gemma3", "demo-smollm2": "demo-smollm2",
                   "demo-gemma3:latest": "demo-gemma3"}


def test_ollama_routes_resolve_and_load_the_same_way(served):
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=served.url.rstrip("/"), timeout=300)
    loaded = served.state.pair_id
    other = "demo-smollm2" if loaded == "demo-gemma3" else "demo-gemma3"
    tags = [m.model for m in client.list().models]
    assert tags[0] == f"{loaded}:latest" and f"{other}:latest" in tags
    shown = client.show(other)  # from the header: showing loads nothing
    assert shown.modelinfo["tandem.loaded"] is False and served.state.pair_id == loaded
    reply = client.chat(model=f"{other}:latest", messages=ASK, options={"temperature": 0, "num_predict": 8})
    assert reply.model == f"{other}:latest" and reply.message.content and served.state.pair_id == other
    done = client.generate(model=loaded)  # nothing to generate: Ollama's way to load a model
    assert done.done_reason == "load" and done.model == f"{loaded}:latest"
    assert [m.model for m in client.ps().models] == [f"{loaded}:latest"]
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="llama3:8b", messages=ASK)
    assert err.value.status_code == 404 and served.state.pair_id == loaded
