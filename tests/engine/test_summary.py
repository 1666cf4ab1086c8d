"""``Summary``'s JSON contract (``summary.py``): the field names, their order and values that the API, bench, the
Pair lab and the saved history read, written out literally (taken from the untyped implementation on the same
steps); and the drafters' shares it derives. Pure: no models."""

from __future__ import annotations

from app.engine.events import DoneEvent
from app.engine.stats import Stats
from app.engine.summary import Summary

from support.steps import STEPS, summary_of

SUMMARY = {  # Stats.summary(8.0) of STEPS as the untyped implementation returned it
    "tokens": 8, "steps": 3, "drafted": 7, "accepted": 5, "acceptance_rate": 0.7142857142857143,
    "mean_accepted": 2.6666666666666665, "alpha": 0.8333333333333334, "mean_k": 3.5, "per_position": [1.0, 1.0, 0.5],
    "histogram": [0, 0, 1, 1], "tested_at": [2, 2, 2], "accepted_at": [2, 2, 1], "rejections": 1, "spec_steps": 2,
    "t_verify_spec": 0.25, "tokens_per_s": 16.0, "t_draft": 0.09375, "t_verify": 0.3125, "t_total": 0.5,
    "baseline_tps": 8.0, "speedup": 2.0, "paused_steps": 1, "probe_steps": 1, "limit": "drafting cannot pay here",
    "c": 0.10714285714285714, "v": 1.0, "bound": 2.442611681028458, "efficiency": 0.8187957240742839,
    # added since, after the old keys: which drafter (two drafters at once) and the MTP head's sync time
    "lookup_drafted": 0, "lookup_accepted": 0, "t_sync": 0.0,
    "lookup_earlier": 0,  # … and how many of lookup's tokens came from an earlier request's text
    "tree_steps": 0, "tree_tokens": 0, "tree_accepted": 0, "branch_hits": 0,  # tree drafts (decoding/tree.py)
}


def test_summary_to_dict_is_the_old_dict_key_for_key():
    out = summary_of(STEPS, 8.0).to_dict()
    assert list(out.items()) == list(SUMMARY.items())  # same keys, same order, same values
    assert DoneEvent("eog", summary_of(STEPS, 8.0)).as_dict()["stats"] == SUMMARY
    assert summary_of(STEPS, 8.0).paused_share == 1 / 3


def test_an_empty_summary_is_an_empty_generations():
    empty = Summary()
    assert empty == Stats().summary() and list(empty.to_dict()) == list(SUMMARY)
    assert empty.to_dict() == {**{k: 0 for k in ("tokens", "steps", "drafted", "accepted", "rejections", "spec_steps",
                                                 "paused_steps", "probe_steps", "lookup_drafted", "lookup_accepted",
                                                 "lookup_earlier", "tree_steps", "tree_tokens", "tree_accepted",
                                                 "branch_hits")},
                               **{k: 0.0 for k in ("acceptance_rate", "mean_accepted", "alpha", "mean_k",
                                                   "t_verify_spec", "tokens_per_s", "t_draft", "t_verify", "t_total",
                                                   "t_sync")},
                               **{k: [] for k in ("per_position", "histogram", "tested_at", "accepted_at")},
                               **{k: None for k in ("baseline_tps", "speedup", "limit", "c", "v", "bound",
                                                    "efficiency")}}
    assert empty.paused_share is None


def test_the_drafters_shares():
    mixed = Summary(steps=8, drafted=10, accepted=6, lookup_drafted=4, lookup_accepted=3, paused_steps=2)
    assert (mixed.model_drafted, mixed.model_accepted, mixed.lookup_share, mixed.paused_share) == (6, 3, 0.5, 0.25)
    assert Summary(drafted=4).lookup_share is None  # nothing accepted: no share to give
