"""The Pair lab's plan with a head that reads the target's layers (an EAGLE-3 head, a DFlash block drafter) as the
pair's draft: the head is a candidate of its own, named as what it is, ranked beside prompt lookup and the
combined drafter; a head made for another target is no candidate (skipped with the words ``models check`` says).

Made-up files (tests/support/tinyeagle3.py, tinydflash.py, random weights): the sweep checks that every candidate
is measured and ranked, never how fast any is.
"""

from __future__ import annotations

import pytest

from app.engine.pair import Pair
from app.lab import tune
from app.lab.lab import LabRequest, plan
from app.testing import load_options
from support.tinydflash import write_dflash, write_target
from support.tinyeagle3 import write_eagle3, write_llama

HEAD = "head (EAGLE-3 head)"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A data folder of its own: no installed model but the files beside the made-up target."""
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def files(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("lab-heads")
    vocab = smol_paths[1]
    return {"target": write_llama(d / "target.gguf", vocab, seed=1), "head": write_eagle3(d / "head.gguf", vocab, seed=1),
            "deep": write_eagle3(d / "deep.gguf", vocab, seed=1, layers=(0, 2, 4))}


@pytest.fixture(scope="module")
def dflash_pair(tmp_path_factory, smol_paths):
    d = tmp_path_factory.mktemp("lab-dflash")
    target = write_target(d / "flag-target.gguf", smol_paths[1], seed=1)
    with Pair.load(target, write_dflash(d / "block.gguf", smol_paths[1], seed=1), load_options(n_ctx=512)) as pair:
        yield pair


@pytest.fixture(scope="module")
def e3_pair(files):
    with Pair.load(files["target"], files["head"], load_options(n_ctx=512)) as pair:
        yield pair


def test_an_eagle3_head_is_ranked_beside_lookup_and_the_combined_drafter(e3_pair, home):
    cfg = plan(e3_pair, LabRequest(quick=True, ks="2", max_tokens=16))
    assert [(c.id, c.proposer) for c in cfg.candidates] == [
        (HEAD, "draft"), ("lookup", "lookup"), (f"auto ({HEAD} + lookup)", "auto")]
    result = tune.sweep(e3_pair, cfg)
    assert not result.errors
    cells = {c["draft"]: c for c in result.cells}
    assert set(cells) == {HEAD, "lookup", f"auto ({HEAD} + lookup)"}
    assert cells[HEAD]["acceptance_rate"] is not None and cells[HEAD]["draft_path"] == str(e3_pair.draft.path)
    ranked = result.recommendations["all"]  # the best of the three, with the next-best beside it
    assert ranked["draft"] in cells and ranked["next"]["draft"] in cells


def test_a_dflash_drafter_is_ranked_beside_lookup_and_the_combined_drafter(dflash_pair, home):
    block = "block (DFlash block)"
    cfg = plan(dflash_pair, LabRequest(quick=True, ks="3", max_tokens=16))
    assert [c.id for c in cfg.candidates] == [block, "lookup", f"auto ({block} + lookup)"]
    result = tune.sweep(dflash_pair, cfg)
    assert not result.errors and {c["draft"] for c in result.cells} == {c.id for c in cfg.candidates}
    assert next(c for c in result.cells if c["draft"] == block)["acceptance_rate"] is not None


def test_a_head_is_picked_by_its_file_name_or_stem_and_auto_by_auto(e3_pair, home):
    for name in ("head", "head.gguf", HEAD):
        assert [c.id for c in plan(e3_pair, LabRequest(drafts=name, quick=True)).candidates] == [HEAD]
    assert [c.proposer for c in plan(e3_pair, LabRequest(drafts="auto", quick=True)).candidates] == ["auto"]


def test_a_head_made_for_another_target_is_skipped_with_the_reason(e3_pair, home):
    skipped: dict = {}
    cfg = plan(e3_pair, LabRequest(drafts="all", ks="2"), on_skip=lambda name, why: skipped.setdefault(name, why))
    assert HEAD in [c.id for c in cfg.candidates] and not any("deep" in c.id for c in cfg.candidates)
    assert skipped["deep.gguf"] == "it reads layer 4, but the target has layers 0-3: it was made for another model"
