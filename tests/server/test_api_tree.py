"""Proposer tree through the API with the real ``openai`` client, on a made-up target and a bigram draft whose
branches are taken: the reply equals plain decoding at T = 0 and the stats and timings say what the trees did; the
Chat offers tree for this pair; a request the tree cannot serve (a grammar) is a 400 naming why."""

from __future__ import annotations

import pytest

from app.service.state import AppState
from app.ui import controls
from support.treepair import made_up_tree_pair


@pytest.fixture(scope="module")
def tree_pair(tmp_path_factory, smol_paths):
    pair = made_up_tree_pair(tmp_path_factory.mktemp("tree-api"), smol_paths[1])
    yield pair
    pair.close()


def test_api_tree_equals_plain_and_reports_its_branches(tree_pair):
    import openai

    from support.api_inproc import Served, assert_spec_equals_plain

    served = Served(tree_pair, pair_id="tiny-tree")
    try:
        client = served.client()
        stats = assert_spec_equals_plain(client, {"proposer": "tree", "k": 4})
        assert stats["tree_target_passes"] > 0 and stats["tree_branch_tokens_count"] > 0
        assert stats["tree_branch_hits"] > 0 and stats["tree_accepted_path_length"] > 0
        with pytest.raises(openai.BadRequestError, match="grammar"):
            client.completions.create(model="", prompt="Once", max_tokens=4,
                                      extra_body={"proposer": "tree", "json_schema": {"type": "object"}})
    finally:
        served.close()


def test_ui_offers_tree_beside_a_draft_model(tree_pair):
    choices = controls.proposer_choices(AppState(pair=tree_pair, pair_id=None))
    assert ("tree (the draft model, with branches)", "tree") in choices
