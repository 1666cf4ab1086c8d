"""Hostile model files, part 4: a pair whose target ships a chat template that recurses, renders nothing,
loops or renders 100 MB. Its load is refused with one line naming the file (and the limit where one was
passed), and the previous pair stays loaded *and* every front end says so: ``/v1/models``, ``/health``, a
chat, the UI's header and pair settings. Once: the UI said "the previous pair is still loaded" while
``/v1/models`` listed the new one and every chat answered 500. The real demo model with its template
rewritten (``support.chat_template``), the real llama.cpp, the API over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from app.engine.decoding.text import TEMPLATE_CHARS, TemplateError
from app.engine.pair import Pair
from app.service.loading import PairOptions, load_into
from app.testing import load_options
from support.api_inproc import Served
from support.chat_template import HUGE, LOOPS, NOTHING, RECURSES, with_template

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

CASES = [  # (template, the words of the one line after the file's name)
    (RECURSES, "the chat template recurses without end; the model was not loaded"),
    (NOTHING, "the chat template renders nothing; the model was not loaded"),
    ("{{ '<|im_start|>assistant\\n' }}", "the chat template renders a conversation without the user's message"),
    (LOOPS, "the chat template took more than 1 s to render (the limit, TANDEM_TEMPLATE_SECONDS)"),
    (HUGE, f"the chat template renders more than {TEMPLATE_CHARS} characters (the limit)"),
]


@pytest.fixture(scope="module")
def served(smol_paths):
    """The API over a pair of its own (this module loads and refuses pairs in its state)."""
    pair = Pair.load(smol_paths[0], smol_paths[1], load_options(n_ctx=2048))
    api = Served(pair, pair_id="demo-smollm2")
    yield api
    api.close()
    pair.close()


def chat(api: Served) -> tuple[int, dict]:
    body = json.dumps({"model": "demo-smollm2", "max_tokens": 4, "temperature": 0,
                       "messages": [{"role": "user", "content": "Hi"}]}).encode()
    req = urllib.request.Request(api.url + "v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, json.loads(r.read())


@pytest.mark.parametrize("template, words", CASES, ids=["recurses", "nothing", "no-message", "loops", "100MB"])
def test_a_refused_template_leaves_the_previous_pair_loaded_and_said_everywhere(served, smol_paths, tmp_path,
                                                                               monkeypatch, template, words):
    from app.ui.app import _header
    from app.ui.tabs.pair import info_html

    monkeypatch.setenv("TANDEM_TEMPLATE_SECONDS", "1")
    state, before = served.state, served.state.pair
    bad = with_template(smol_paths[1], tmp_path / "hostile.gguf", template)
    with pytest.raises(TemplateError) as err:
        load_into(state, PairOptions(bad, smol_paths[1], (0, 0), 2048))
    line = str(err.value)
    assert line.startswith("hostile.gguf: ") and words in line and "\n" not in line
    assert state.pair is before and state.pair_id == "demo-smollm2"

    status, _, body = served.get("/v1/models")
    listed = json.loads(body)["data"]
    assert status == 200 and (listed[0]["id"], listed[0]["target"], listed[0]["loaded"]) == \
        ("demo-smollm2", smol_paths[0].name, True)  # once: the refused pair
    assert not any("hostile" in m["target"] for m in listed)
    assert served.get("/health")[0] == 200
    status, reply = chat(served)
    assert status == 200 and reply["choices"][0]["message"]["content"]  # once: 500 on every chat
    assert smol_paths[0].stem.split(".")[0] in _header(state) and "hostile" not in _header(state)
    assert smol_paths[0].name in info_html(state) and "hostile" not in info_html(state)


def test_a_template_that_loops_only_on_a_later_turn_is_stopped_at_chat_time(smol_paths, tmp_path, monkeypatch):
    """The load's check renders one message; a template that loops from the second on passes it, and is stopped
    when a chat reaches it: a 400 naming the limit, and the next chat is answered."""
    monkeypatch.setenv("TANDEM_TEMPLATE_SECONDS", "1")
    later = ("{% if messages | length > 1 %}" + LOOPS + "{% endif %}{% for m in messages %}<|im_start|>"
             "{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
    pair = Pair.load(with_template(smol_paths[1], tmp_path / "later.gguf", later), None, load_options(n_ctx=512))
    api = Served(pair, pair_id="later")
    try:
        body = {"model": "later", "max_tokens": 2, "messages": [{"role": "user", "content": "a"},
                                                             {"role": "assistant", "content": "b"},
                                                             {"role": "user", "content": "c"}]}
        req = urllib.request.Request(api.url + "v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=120)
        assert err.value.code == 400
        assert "took more than 1 s to render (the limit" in json.loads(err.value.read())["error"]["message"]
        assert chat(api)[0] == 200
    finally:
        api.close()
        pair.close()
