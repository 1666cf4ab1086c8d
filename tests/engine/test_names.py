"""The names a setting takes (``names.py``): each member equals, prints, formats and serialises as the word users
type, and a word outside the set is refused. Pure."""

from __future__ import annotations

import json

import pytest

from app.engine.names import AUTO_K, PROPOSERS, RULES, AutoK, ProposerName, Rule


def test_members_are_their_words():
    assert PROPOSERS == ("auto", "draft", "lookup", "mtp", "tree") and RULES == ("rejection", "match", "coupled")
    for enum in (ProposerName, Rule, AutoK):
        for member in enum:
            word = member.value
            assert member == word and str(member) == word and f"{member}" == word and f"{member:>12}" == f"{word:>12}"
            assert json.dumps(member) == json.dumps(word) and enum(word) is member
    assert AUTO_K == "auto" and AUTO_K is AutoK.AUTO
    assert "draft" in PROPOSERS and ProposerName.DRAFT in PROPOSERS  # the words for argparse and messages


def test_a_word_outside_the_set_is_refused():
    for enum, word in ((ProposerName, "Draft"), (Rule, "exact"), (AutoK, "adaptive")):
        with pytest.raises(ValueError):
            enum(word)
