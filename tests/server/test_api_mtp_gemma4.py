"""A Gemma-4 assistant drafter through the API with the real ``openai`` client and in the app's draft choice, on a
made-up Gemma-4 target and assistant (tests/support/tinygemma4.py): the reply equals plain decoding at T = 0,
and the drafter is named as what it is."""

from __future__ import annotations

import pytest

from app.engine.pair import Pair
from app.service.state import AppState
from app.testing import load_options
from app.ui import controls
from support.tinygemma4 import write_gemma4, write_gemma4_assistant


@pytest.fixture(scope="module")
def gemma4_pair(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("gemma4-api")
    target = write_gemma4(d / "tiny-gemma4.gguf", smol_paths[1], seed=1)
    assistant = write_gemma4_assistant(d / "tiny-gemma4-assistant.gguf", smol_paths[1], seed=1)
    pair = Pair.load(target, assistant, load_options(n_ctx=1024))
    yield pair
    pair.close()


def test_api_gemma4_assistant_equals_plain(gemma4_pair):
    from support.api_inproc import Served, assert_spec_equals_plain

    served = Served(gemma4_pair, pair_id="tiny-gemma4")
    try:
        stats = assert_spec_equals_plain(served.client(), {"proposer": "draft", "k": 3})
        assert stats["draft_model"] == "tiny-gemma4-assistant.gguf (assistant drafter)"
    finally:
        served.close()


def test_ui_offers_the_assistant_drafter_by_name(gemma4_pair):
    choices = controls.proposer_choices(AppState(pair=gemma4_pair, pair_id=None))
    assert ("assistant drafter", "draft") in choices and all(v != "mtp" for _, v in choices)
    assert ("tree (the assistant drafter, with branches)", "tree") in choices  # its chain, with branches
