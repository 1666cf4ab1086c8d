"""An EAGLE-3 head through the API with the real ``openai`` client and in the app's draft choice, on a made-up
target and head (tests/support/tinyeagle3.py): the reply equals plain decoding at T = 0, and the head is named as
what it is ("EAGLE-3 head") in the API's stats, /metrics, the Chat's draft choice and the inspector."""

from __future__ import annotations

import pytest

from app.engine.pair import Pair
from app.service.state import AppState
from app.testing import load_options
from app.ui import controls
from support.tinyeagle3 import write_eagle3, write_llama


@pytest.fixture(scope="module")
def eagle3_pair(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("eagle3-api")
    target = write_llama(d / "tiny-llama.gguf", smol_paths[1], seed=1)
    head = write_eagle3(d / "tiny-eagle3.gguf", smol_paths[1], seed=1)
    pair = Pair.load(target, head, load_options(n_ctx=1024))
    yield pair
    pair.close()


def test_api_eagle3_equals_plain_and_names_the_head(eagle3_pair):
    from support.api_inproc import Served, assert_spec_equals_plain

    served = Served(eagle3_pair, pair_id="tiny-eagle3")
    try:
        stats = assert_spec_equals_plain(served.client(), {"proposer": "draft", "k": 3})
        assert stats["draft_model"] == "tiny-eagle3.gguf (EAGLE-3 head)"
        status, _, body = served.get("/metrics")
        assert status == 200 and 'tandem_draft_info{draft="tiny-eagle3.gguf",kind="EAGLE-3 head"} 1.0' in body.decode()
    finally:
        served.close()


def test_ui_offers_the_eagle3_head_by_name(eagle3_pair):
    choices = controls.proposer_choices(AppState(pair=eagle3_pair, pair_id=None))
    assert ("EAGLE-3 head", "draft") in choices and all(v != "mtp" for _, v in choices)
    assert ("tree (the EAGLE-3 head, with branches)", "tree") in choices  # its chain, with branches


def test_the_inspector_names_the_eagle3_head(eagle3_pair):
    """A reply's drafted tokens say they were proposed by the EAGLE-3 head (the runner's words for the job)."""
    from app.engine.loop import GenConfig
    from app.service.runner import drafter_words

    assert drafter_words(eagle3_pair, GenConfig(proposer="draft", k=3)) == "EAGLE-3 head"
    assert drafter_words(eagle3_pair, GenConfig(proposer="lookup")) is None
    assert drafter_words(eagle3_pair, GenConfig(speculative=False)) is None
