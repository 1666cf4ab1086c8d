"""A DFlash block drafter through the API with the real ``openai`` client and in the app's draft choice, on a made-up
target and drafter (tests/support/tinydflash.py): the reply equals plain decoding at T = 0, and the drafter is named
as what it is ("DFlash block") in the API's stats, /metrics and the Chat's draft choice."""

from __future__ import annotations

import pytest

from app.engine.pair import Pair
from app.service.state import AppState
from app.testing import load_options
from app.ui import controls
from support.tinydflash import write_dflash, write_target


@pytest.fixture(scope="module")
def dflash_pair(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("dflash-api")
    target = write_target(d / "tiny-flag-llama.gguf", smol_paths[1], seed=1)
    drafter = write_dflash(d / "tiny-dflash.gguf", smol_paths[1], seed=1)
    pair = Pair.load(target, drafter, load_options(n_ctx=1024))
    yield pair
    pair.close()


def test_api_dflash_equals_plain_and_names_the_block(dflash_pair):
    from support.api_inproc import Served, assert_spec_equals_plain

    served = Served(dflash_pair, pair_id="tiny-dflash")
    try:
        stats = assert_spec_equals_plain(served.client(), {"proposer": "draft", "k": 3})
        assert stats["draft_model"] == "tiny-dflash.gguf (DFlash block)"
        status, _, body = served.get("/metrics")  # and /metrics names what its drafter="draft" counters count
        assert status == 200 and 'tandem_draft_info{draft="tiny-dflash.gguf",kind="DFlash block"} 1.0' in body.decode()
    finally:
        served.close()


def test_ui_offers_the_dflash_block_by_name(dflash_pair):
    choices = controls.proposer_choices(AppState(pair=dflash_pair, pair_id=None))
    assert ("DFlash block", "draft") in choices and all(v != "mtp" for _, v in choices)
    assert ("tree (the DFlash block, with branches)", "tree") in choices  # its chain, with branches
