"""A head that reads its target's layers (an EAGLE-3 head, a DFlash drafter), judged from the two GGUF headers
before anything is loaded: ``models check``, the Pair settings verdict and the engine's own load say the same words.

Made-up files (tests/support/tinyeagle3.py, tinydflash.py): tiny Llama targets (4 layers, 64 wide) and heads with
random weights, one of each kind for them and three that are not; the wrong-architecture case is a head written
for the demo Gemma-3 (its vocabulary, its width and layers), an architecture whose graph records no layer inputs,
so that only the architecture stands in the way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.drafters.dflash import DFlashError
from app.engine.drafters.eagle3 import Eagle3Error
from app.engine.pair import Pair
from app.models import compat, heads, meta
from app.testing import load_options
from app.ui.tabs.pair import verdict
from support.tinydflash import write_dflash, write_target
from support.tinyeagle3 import N_EMBD, write_eagle3, write_llama

ROOT = Path(__file__).resolve().parents[2]
ARCH_WORDS = "llama.cpp does not record the layer inputs of gemma3 targets, which an EAGLE-3 head reads"
WIDTH_WORDS = f"it reads rows {2 * N_EMBD} wide but the target's are {N_EMBD}: it was made for another model"
LAYER_WORDS = "it reads layer 4, but the target has layers 0-3: it was made for another model"


@pytest.fixture(scope="module")
def files(tmp_path_factory, smol_paths, gemma_paths):
    d = tmp_path_factory.mktemp("heads")
    vocab = smol_paths[1]
    gemma = meta.read(gemma_paths[0])[0]
    return {
        "target": write_llama(d / "target.gguf", vocab, seed=1),
        "head": write_eagle3(d / "head.gguf", vocab, seed=1),
        "deep": write_eagle3(d / "deep.gguf", vocab, seed=1, layers=(0, 2, 4)),
        "wide": write_eagle3(d / "wide.gguf", vocab, seed=1, target_hidden=2 * N_EMBD),
        "gemma_target": Path(gemma_paths[0]),
        "gemma_head": write_eagle3(d / "gemma-head.gguf", gemma_paths[1], seed=1, target_hidden=gemma.n_embd,
                                   layers=(2, gemma.n_layers // 2, gemma.n_layers - 3)),
        "flag_target": write_target(d / "flag-target.gguf", vocab, seed=1),
        "dflash": write_dflash(d / "dflash.gguf", vocab, seed=1),
        "dspark": write_dflash(d / "dspark.gguf", vocab, seed=1, dspark=True),
        "dflash_deep": write_dflash(d / "dflash-deep.gguf", vocab, seed=1, layers=(0, 1, 4)),
        "dflash_wide": write_dflash(d / "dflash-wide.gguf", vocab, seed=1, n_embd=2 * N_EMBD),
        "dflash_nomask": write_dflash(d / "dflash-nomask.gguf", vocab, seed=1, mask=False),
        "dflash2": write_dflash(d / "dflash2.gguf", vocab, seed=1, selector_rank=4),
        "dspark_noblock": write_dflash(d / "dspark-noblock.gguf", vocab, seed=1, dspark=True, block=None),
        "gemma_dflash": write_dflash(d / "gemma-dflash.gguf", gemma_paths[1], seed=1, n_embd=gemma.n_embd,
                                     layers=(2, gemma.n_layers // 2, gemma.n_layers - 3)),
    }


def judged(files, target: str, draft: str) -> compat.Verdict:
    return compat.check_pair(str(files[target]), str(files[draft]), remember=False)


def test_the_head_metadata_is_read_from_the_header(files):
    head, _ = meta.read(files["head"])
    assert head.architecture == "eagle3" and head.target_layers == (0, 2, 3) and head.target_hidden == N_EMBD
    target, _ = meta.read(files["target"])
    assert target.target_layers == () and heads.kind(target.architecture) is None
    assert heads.label_of(files["head"]) == "EAGLE-3 head" and heads.label_of(files["target"]) is None


@pytest.mark.parametrize("target,draft,kind,reads", [
    ("target", "head", "is an EAGLE-3 head", "layers 0, 2, 3 (64 wide each)"),
    ("flag_target", "dflash", "is a DFlash drafter", "layers 0, 1, 3 (64 wide each)"),
    ("flag_target", "dspark", "is a DFlash drafter", "layers 0, 1, 3 (64 wide each)"),
])
def test_a_head_for_its_target_is_accepted_and_named(files, target, draft, kind, reads):
    v = judged(files, target, draft)
    assert v.ok and kind in v.extra["head"] and reads in v.extra["head"]
    arch = meta.read(files[draft])[0].architecture
    ok, words = verdict(str(files[target]), str(files[draft]))
    assert ok and words.startswith(f"Compatible: the vocabularies match. The draft ({arch}) {kind}")


@pytest.mark.parametrize("target,draft,words", [
    ("gemma_target", "gemma_head", ARCH_WORDS),
    ("target", "wide", WIDTH_WORDS),
    ("target", "deep", LAYER_WORDS),
    ("gemma_target", "gemma_dflash", ARCH_WORDS.replace("an EAGLE-3 head", "a DFlash drafter")),
    ("flag_target", "dflash_wide", WIDTH_WORDS),
    ("flag_target", "dflash_deep", LAYER_WORDS),
    ("flag_target", "dflash_nomask", "it names no mask token (tokenizer.ggml.mask_token_id), which fills its draft "
                                     "block"),
    ("flag_target", "dflash2", "a DFlash2 drafter (it drafts through a selector lattice, not logits): Tandem reads "
                               "DFlash and DSpark blocks only"),
    ("flag_target", "dspark_noblock", "a DSpark drafter without dflash.block_size in its metadata"),
])
def test_a_head_that_cannot_draft_for_the_target_is_refused_in_the_engines_words(files, target, draft, words):
    v = judged(files, target, draft)
    assert not v.ok and v.reason == words and v.extra["head"].startswith(f"the draft ({v.draft.meta['architecture']})")
    assert verdict(str(files[target]), str(files[draft])) == (False, f"Refused: {words}")  # Pair settings
    assert heads.file_refusal(files[target], files[draft]) == f"{files[draft].name}: {words}"


@pytest.mark.parametrize("target,draft,error", [("target", "wide", Eagle3Error), ("target", "deep", Eagle3Error),
                                                ("flag_target", "dflash_wide", DFlashError),
                                                ("flag_target", "dflash_deep", DFlashError),
                                                ("flag_target", "dflash_nomask", DFlashError),
                                                ("flag_target", "dflash2", DFlashError),
                                                ("flag_target", "dspark_noblock", DFlashError)])
def test_loading_says_what_the_header_check_said(files, target, draft, error):
    """The engine refuses the same pairs when it loads them, with the same words (the same check)."""
    with pytest.raises(error) as err:
        Pair.load(files[target], files[draft], load_options(n_ctx=256)).close()
    assert judged(files, target, draft).reason in str(err.value)


def test_a_head_given_as_the_target_is_refused(files):
    v = judged(files, "head", "target")
    assert not v.ok and v.reason.startswith("the target (eagle3) is an EAGLE-3 head: it drafts only beside")
    assert verdict(str(files["head"]), str(files["target"]))[0] is False
    assert judged(files, "dflash", "flag_target").reason.startswith("the target (dflash) is a DFlash drafter")


def check_cli(tmp_path, target: Path, draft: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TANDEM_HOME=str(tmp_path / "home"), TANDEM_QUIET="1")
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), "models", "check", str(target), str(draft)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_models_check_names_the_head_and_refuses_in_one_line(files, tmp_path):
    ok = check_cli(tmp_path, files["target"], files["head"])
    assert ok.returncode == 0 and ok.stdout.startswith("compatible: "), ok.stderr
    assert "  head: the draft (eagle3) is an EAGLE-3 head: it drafts from the inputs of the target's layers 0, 2, 3" \
        in ok.stdout
    bad = check_cli(tmp_path, files["gemma_target"], files["gemma_head"])
    assert bad.returncode == 1 and bad.stdout.splitlines()[0] == f"INCOMPATIBLE: {ARCH_WORDS}"
    assert "Traceback" not in bad.stderr + bad.stdout


@pytest.mark.parametrize("pair_id,label,repo,file", [
    ("gpt-oss-20b-eagle3", "EAGLE-3 head", "ggml-org/gpt-oss-20b-GGUF", "eagle3-gpt-oss-20b-Q8_0.gguf"),
    ("qwen3-8b-dflash", "DFlash block", "ggml-org/Qwen3-8B-GGUF", "dflash-Qwen3-8B-Q8_0.gguf"),
])
def test_the_catalog_head_pairs_are_listed_offline(tmp_path, monkeypatch, pair_id, label, repo, file):
    """Real heads from the Hub (not reachable here): each loads from the catalog as its kind of head beside its
    target, and the fit table lists its pair without any download or header read (figures unknown until then)."""
    from app.models import advice, catalog, hardware

    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    cat = catalog.load()
    assert not cat.errors
    pair = cat.pairs[pair_id]
    target, head = cat.models[pair.target], cat.models[pair.draft]
    assert heads.kind(head.arch).label == label and heads.kind(target.arch) is None
    assert (head.repo, head.file) == (repo, file)
    assert "published" in pair.notes and "not measured here" in pair.notes
    row = next(r for r in advice.label_pairs(cat, hardware.detect()) if r["pair"] == pair.id)
    assert row["fit"] == "unknown" and row["compatible"] is None and not row["installed"]
