"""Generation settings as the UI and the API see them: the lookup-memory choice (the other keys: test_ui_api)."""

from __future__ import annotations

import pytest

from app.engine.names import LookupMemory
from app.service import settings as S


def test_lookup_memory_is_the_conversations_by_default_and_reaches_the_engine():
    resolved = S.resolve({})
    assert resolved["lookup_memory"] == LookupMemory.CONVERSATION
    assert S.to_config(resolved).lookup_memory == LookupMemory.CONVERSATION
    pair = S.resolve({"lookup_memory": " Pair "})
    assert pair["lookup_memory"] is LookupMemory.PAIR and S.to_config(pair).lookup_memory == LookupMemory.PAIR


def test_an_unknown_lookup_memory_is_refused_naming_the_setting_and_the_choices():
    with pytest.raises(S.SettingsError) as err:
        S.resolve({"lookup_memory": "forever"})
    assert err.value.param == "lookup_memory"
    assert "conversation, pair" in str(err.value) and "forever" in str(err.value)
