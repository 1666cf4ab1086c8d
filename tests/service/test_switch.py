"""The names an API request may give a pair (``service.switch``), over the real catalog and the test data folder's
installed demo pairs: pair ids, target ids and file names, Ollama's ``:latest``; an empty name is "the loaded
pair"; an unknown one is a 404 naming installed ids. No pair is loaded here (the server tests switch pairs)."""

from __future__ import annotations

import pytest

from app.service import switch
from app.service.state import AppState


@pytest.fixture(scope="module")
def pairs(smol_paths, gemma_paths):
    return switch.installed_pairs()


def test_installed_pairs_are_the_catalog_pairs_whose_files_are_here(pairs, gemma_paths):
    ids = [p.id for p in pairs]
    assert "demo-smollm2" in ids and "demo-gemma3" in ids
    gemma = next(p for p in pairs if p.id == "demo-gemma3")
    assert (gemma.target, gemma.draft) == tuple(gemma_paths) and gemma.names[0] == "demo-gemma3"
    assert all(p.target.is_file() and p.draft.is_file() for p in pairs)


@pytest.mark.parametrize("name", ["demo-gemma3", "demo-gemma3:latest", " demo-gemma3 ", "gemma-3-270m-f32",
                                  "gemma-3-270m.F32.gguf", "gemma-3-270m.F32"])
def test_every_name_of_a_pair_resolves_to_it(pairs, name):
    assert switch.resolve(AppState(), name, "none", pairs).id == "demo-gemma3"


def test_an_empty_name_is_the_loaded_pair_and_an_unknown_one_a_404(pairs):
    assert switch.resolve(AppState(), "", "none", pairs) is None
    assert switch.resolve(AppState(), "  ", "none", pairs) is None
    with pytest.raises(switch.UnknownModel) as err:
        switch.resolve(AppState(), "gpt-3.5-turbo", "none", pairs)
    assert err.value.status == 404 and err.value.code == "model_not_found" and err.value.param == "model"
    assert "'gpt-3.5-turbo'" in str(err.value) and "demo-smollm2" in str(err.value)
