"""The Benchmark tab's texts (``app/ui/tabs/benchview.py``): the columns' glossary in the Chat's words, what the
tab opens on from the stored history, Run A / Run B's defaults and a running sweep's time. Pure functions on a
history in a tmp folder."""

from __future__ import annotations

from app.lab.history import History
from app.ui.tabs import benchview


def test_the_lab_glossary_defines_every_column_it_names():
    text = benchview.lab_glossary_html()
    for term in ("accept", "c", "v", "bound", "repeats", "Cost of one draft token", "accepted ÷ drafted"):
        assert term in text, term


def test_the_tab_opens_on_the_pairs_latest_sweep_and_the_newest_two_runs(tmp_path):
    hist = History(tmp_path / "pairlab.sqlite")
    assert benchview.latest_ids(hist) == ("", "")  # nothing stored: the fields stay empty, with a hint
    assert "No result yet" in benchview.latest_md("demo-smollm2", hist)
    result = {"cells": [{"draft": "lookup", "k": 2, "speedup": 1.2}], "baseline_tps": 40.0,
              "recommendations": {"all": {"draft": "lookup", "k": 2, "speedup": 1.2, "speedup_min": 1.1,
                                          "speedup_max": 1.3, "repeat_min": 1.15, "repeat_max": 1.25,
                                          "next": {"draft": "d", "k": 4, "speedup": 1.18}, "within_noise": True}}}
    for pair in ("demo-smollm2", "demo-gemma3"):
        run = hist.start(pair, "t.gguf", {"quick": True}, {})
        hist.finish(run, result)
    shown = benchview.latest_md("demo-smollm2", hist)
    assert "Latest sweep of this pair: run #1" in shown and "within noise" in shown and "No result yet" not in shown
    assert "No sweep of this pair (demo-qwen-coder) yet" in benchview.latest_md("demo-qwen-coder", hist)
    assert benchview.latest_ids(hist) == ("2", "1")


def test_a_running_sweep_says_elapsed_and_left():
    assert benchview.running_words(12.4, 4, 16) == "12 s elapsed, ≈ 37 s left (estimate at this sweep's pace)"
    assert benchview.running_words(0.5, 0, 16) == "0 s elapsed"
