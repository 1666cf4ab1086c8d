"""The API says when and why auto K paused the draft (LM Studio-style ``stats``), and Compare's and Chat's
figures say the same: a run that drafted nothing shows no acceptance and says why (no server, no model)."""

from __future__ import annotations

from app.engine.summary import Summary
from app.server import openai_format as F
from app.ui import panel

WHY = "a draft token costs 1.17 of a target step on this machine: drafting cannot pay here"


def test_stats_carry_the_paused_passes_and_the_reason():
    paused = Summary(tokens=30, steps=30, drafted=4, accepted=4, paused_steps=29, limit=WHY)
    st = F.lmstudio_stats(paused, speculative=True, draft_model="d", completion_tokens=30, ttft=0.1, reason="eog")
    assert st["paused_target_passes"] == 29 and st["paused_reason"] == WHY
    drafting = Summary(tokens=30, steps=10, drafted=24, accepted=20)
    st = F.lmstudio_stats(drafting, speculative=True, draft_model="d", completion_tokens=30, ttft=0.1, reason="eog")
    assert st["paused_target_passes"] == 0 and st["paused_reason"] is None


def test_compare_row_says_nothing_was_drafted_and_why_instead_of_0_percent():
    nothing = Summary(tokens=20, steps=20, drafted=0, paused_steps=20, limit=WHY)
    row = panel.compare_row_html({"plain_tps": 30.0, "spec_tps": 29.1, "speedup": 0.97, "acceptance_rate": None,
                                  "mean_accepted": 1.0, "identical": True}, nothing)
    assert "Nothing was drafted" in row and "all 20 target passes" in row and WHY in row
    assert "0%" not in row and "speedup, measured" not in row and "nothing drafted" in row
    some = Summary(tokens=30, steps=30, drafted=4, accepted=4, paused_steps=29, limit=WHY)
    assert f"paused (K = 0) for 29 of 30 target passes: {WHY}" in panel.pause_line(some)
    assert panel.pause_line(Summary(tokens=30, steps=10, drafted=24, accepted=20)) is None
