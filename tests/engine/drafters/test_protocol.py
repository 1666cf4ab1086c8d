"""What the proposer protocol computes itself (``protocol.py``): which drafter each token of a mixed draft came
from (prompt lookup, then the draft model, then lookup taking over), how many of the kept tokens were lookup's, and
where a reply's end cuts a draft. Pure."""

from __future__ import annotations

from app.engine.drafters.protocol import Draft, ProposerBase, end_of_reply


def test_a_mixed_draft_says_which_drafter_proposed_each_token():
    # lookup proposed 10 11, the draft model 12 13, then lookup took over with 14 15
    draft = Draft(tokens=[10, 11, 12, 13, 14, 15], lookup=2, tail=2)
    assert [draft.from_lookup(i) for i in range(6)] == [True, True, False, False, True, True]
    assert [draft.lookup_kept(n) for n in range(7)] == [0, 1, 2, 2, 2, 3, 4]
    model_only = Draft(tokens=[1, 2, 3])
    assert not any(model_only.from_lookup(i) for i in range(3)) and model_only.lookup_kept(3) == 0


def test_a_draft_ends_through_the_first_end_of_generation():
    assert end_of_reply([5, 6, 99, 7, 99], lambda t: t == 99) == 3
    assert end_of_reply([5, 6, 7], lambda t: t == 99) is None
    assert end_of_reply([5, 6], lambda t: None) is None  # a source with no vocabulary cannot tell


def test_a_proposer_without_the_optional_abilities_answers_as_the_protocol_says():
    base = ProposerBase()
    assert (base.couples, base.retest_tokens, base.mixes) == (False, 0, False)
    assert base.time_tokens([1, 2, 3], 4) == 0.0  # nothing to time
