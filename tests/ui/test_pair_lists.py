"""Pair settings' lists without a browser: the Catalog pair list's labels and order, a catalog pair that is not
installed, a chosen file that left the folder (tests/ui/test_browser_pair_lists.py drives the same in Chromium)."""

from __future__ import annotations

import pytest

from app.ui.tabs import pair as tab
from support.tiny_gguf import write_tiny

SMOL = ("SmolLM2-135M-Instruct.F32.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    folder = tmp_path / "home" / "models"
    folder.mkdir(parents=True)
    return folder


def test_every_catalog_pair_is_offered_by_id_and_name_the_installed_first():
    pairs = tab.catalog_pairs()
    choices = tab.preset_choices(pairs, {name: f"/m/{name}" for name in SMOL})
    assert {value for _, value in choices} == set(pairs)  # the ids stay the values the CLI and the API use
    assert choices[0] == (f"demo-smollm2 — {pairs['demo-smollm2'].name} · installed", "demo-smollm2")
    assert [label.endswith("· installed") for label, _ in choices].count(True) == 1
    label = dict((v, k) for k, v in choices)["smollm2-17b-135m"]
    assert "SmolLM2-1.7B" in label and label.endswith("· not installed"), label  # not read as a 17B model


def test_a_pair_that_is_not_installed_says_which_files_are_missing(models):
    target, draft, line = tab.fill_from_preset(tab.catalog_pairs(), "demo-gemma3")
    assert "value" not in target and "value" not in draft  # nothing chosen that is not there
    assert "gemma-3-270m.F32.gguf and gemma-3-270m-q4_k_m.gguf are not in the models folder" in line, line
    assert "launcher.py models pull demo-gemma3" in line


def test_a_chosen_file_that_left_the_folder_is_named_not_judged(models):
    gone = write_tiny(models / "gone.gguf")
    assert "tdm-status-ok" in tab.check_choice("gone.gguf", tab.NO_DRAFT)
    gone.unlink()
    line = tab.check_choice("gone.gguf", tab.NO_DRAFT)
    assert "tdm-status-error" in line and "gone.gguf is not in the models folder" in line, line
    _, target, _ = tab.rescan({}, "gone.gguf", tab.NO_DRAFT)
    assert target["value"] is None and target["choices"] == []  # unchosen: the verdict is judged again
