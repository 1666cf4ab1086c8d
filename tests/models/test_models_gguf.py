"""GGUF metadata, compatibility from metadata alone, and the library, with tiny GGUFs written by ``gguf``
and the real demo models."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.llama.vocab import check
from app.models import compat, ggufheader, library, meta
from support.tiny_gguf import BASE, write_tiny

@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    return tmp_path


def verdict(a: Path, b: Path):
    return check(meta.read(a)[1], meta.read(b)[1])


def test_metadata_of_a_tiny_gguf(tmp_path):
    m, v = meta.read(write_tiny(tmp_path / "t.gguf"))
    assert (m.architecture, m.n_layers, m.context_length, m.n_vocab, m.params) == ("llama", 2, 256, 300, 2400)
    assert (v.vocab_type, v.bos_id, v.eos_id, v.add_bos, v.add_eos) == ("bpe", 1, 2, False, False)


@pytest.mark.parametrize("extra, ok, reason", [
    (100, True, "vocabularies match"),
    (128, True, "vocabularies match"),
    (129, False, "vocabulary sizes differ by 129"),
])
def test_vocab_size_within_and_beyond_128(tmp_path, extra, ok, reason):
    a = write_tiny(tmp_path / "a.gguf")
    b = write_tiny(tmp_path / "b.gguf", tokens=BASE + [f"x{i}" for i in range(extra)])
    got = verdict(a, b)
    assert got.ok is ok and reason in got.reason


def test_changed_token_text_and_bos(tmp_path):
    a = write_tiny(tmp_path / "a.gguf")
    changed = list(BASE)
    changed[42] = "other"
    got = verdict(a, write_tiny(tmp_path / "b.gguf", tokens=changed))
    assert not got.ok and "token 42 differs" in got.reason
    early = list(BASE)
    early[3] = "other"  # ids below 5 are not compared (llama.cpp's rule)
    assert verdict(a, write_tiny(tmp_path / "c.gguf", tokens=early)).ok
    got = verdict(a, write_tiny(tmp_path / "d.gguf", bos=7))
    assert not got.ok and "BOS token id differs" in got.reason


def test_llama_cpp_defaults_when_keys_are_absent(tmp_path):
    _, v = meta.read(write_tiny(tmp_path / "spm.gguf", model="llama", pre=None, bos=None, eos=None))
    assert (v.vocab_type, v.bos_id, v.eos_id, v.add_bos, v.add_eos) == ("spm", 1, 2, True, False)
    _, v = meta.read(write_tiny(tmp_path / "l3.gguf", pre="llama-bpe", bos=None, eos=None))
    assert (v.bos_id, v.eos_id, v.add_bos) == (11, 11, True)
    _, v = meta.read(write_tiny(tmp_path / "glm.gguf", pre="chatglm-bpe", bos=None, tokens=BASE[:10]))
    assert v.bos_id == -1  # no BOS for GLM, and default ids out of range are disabled
    _, v = meta.read(write_tiny(tmp_path / "flag.gguf", model="llama", pre=None, add_bos=False))
    assert v.add_bos is False


def test_cut_and_foreign_files_are_reported(tmp_path):
    good = write_tiny(tmp_path / "g.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ggufheader.GGUFError, match="ends inside its GGUF header"):
        meta.read(cut)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ggufheader.GGUFError, match="not a GGUF file"):
        meta.read(junk)


def test_metadata_matches_the_engine_for_the_demo_models(smol_paths, gemma_paths):
    from app.engine.llama.backend import Model
    from app.testing import load_options

    for path in (smol_paths[1], gemma_paths[1]):
        with Model(path, load_options(n_ctx=256)) as model:
            loaded = model.vocab_info()
        _, from_header = meta.read(path)
        assert from_header.fingerprint() == loaded.fingerprint()
        assert from_header.n_vocab == loaded.n_vocab
    assert not verdict(smol_paths[0], gemma_paths[1]).ok
    assert verdict(gemma_paths[0], gemma_paths[1]).ok


def test_library_import_check_remember_delete(home, smol_paths, gemma_paths):
    rec = library.import_gguf(smol_paths[1])
    assert rec["id"] in {r["id"] for r in library.installed()}
    v = compat.check_pair(rec["id"], str(gemma_paths[1]))
    assert not v.ok and compat.known_verdict(rec["id"], v.draft.id)["ok"] is False
    assert "forgot" in library.delete(rec["id"])
    assert smol_paths[1].exists()  # imported in place: never deleted
    with pytest.raises(library.LibraryError, match="not a GGUF file"):
        bad = home / "bad.gguf"
        bad.write_bytes(b"hello")
        library.import_gguf(bad)
    tiny = library.import_gguf(write_tiny(home / "tiny.gguf"), copy=True)
    copied = Path(tiny["path"])
    assert copied.parent.name == "models" and copied.exists()
    assert "deleted" in library.delete(tiny["id"]) and not copied.exists()


def test_derive_a_draft_from_an_installed_model(home, smol_paths):
    from app.models.derive import derive_draft

    rec = library.import_gguf(smol_paths[1])
    out = derive_draft(rec["id"], "Q4_0")
    assert out["compatible"] and out["parent"] == rec["id"]
    m, _ = meta.read(out["path"])
    assert m.quant == "Q4_0"
    derived = {r["id"]: r for r in library.installed()}[out["id"]]
    assert derived["source"] == "derived" and derived["parent"] == rec["id"]
