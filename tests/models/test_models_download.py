"""Hub downloads and header-only checks against a local Hub (tests/support/hubserver.py) with real GGUF files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.models import compat, download, library
from app.models.catalog import Catalog, ModelEntry
from app.models.download import Cancelled, DownloadError
from app.models.fileops import ChecksumError

from support.hubserver import HubServer

ROOT = Path(__file__).resolve().parents[2]
REPO = "tandem-test/smollm2-gguf"


@pytest.fixture
def hub(smol_paths, gemma_paths, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    monkeypatch.setenv("TANDEM_QUIET", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with HubServer() as server:
        server.add(REPO, smol_paths[1].name, smol_paths[1])
        server.add("tandem-test/gemma-gguf", gemma_paths[1].name, gemma_paths[1])
        server.add("tandem-test/gated", smol_paths[1].name, smol_paths[1], gated=True, allowed_tokens=("hf_ok",))
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_pull_verifies_registers_and_is_instant_next_time(hub, smol_paths):
    name = smol_paths[1].name
    seen = []
    path = download.pull(REPO, name, progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes()[:4] == b"GGUF" and path.stat().st_size == smol_paths[1].stat().st_size
    assert seen and seen[-1][1] >= path.stat().st_size
    ids = {r["id"]: r for r in library.installed()}
    assert Path(ids[library.slug(Path(name).stem)]["path"]) == path
    sent = hub.bytes_sent(name)
    assert download.pull(REPO, name) == path
    assert hub.bytes_sent(name) == sent  # nothing fetched again


def test_connection_cut_mid_body_is_resumed_with_a_range_request(hub, smol_paths):
    from huggingface_hub import constants

    name, chunk = smol_paths[1].name, constants.DOWNLOAD_CHUNK_SIZE  # huggingface_hub writes whole chunks
    hub.drop_after[name] = 2 * chunk + chunk // 2
    path = download.pull(REPO, name)
    assert path.stat().st_size == smol_paths[1].stat().st_size
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith(name)]
    assert gets[0].sent == 2 * chunk + chunk // 2 and gets[1].range == f"bytes={2 * chunk}-"


def test_cancel_keeps_the_part_and_the_next_pull_resumes(hub, smol_paths):
    name, size = smol_paths[1].name, smol_paths[1].stat().st_size
    cancel = threading.Event()

    def progress(done, total):
        if done >= 3 << 20:
            cancel.set()

    with pytest.raises(Cancelled):
        download.pull(REPO, name, progress=progress, cancel=cancel)
    parts = list((Path(os.environ["TANDEM_HOME"]) / "downloads" / "partial").glob("*.incomplete"))
    assert len(parts) == 1 and 0 < parts[0].stat().st_size < size
    kept = parts[0].stat().st_size
    assert library.installed() == [] or all(r["source"] != "hub" for r in library.installed())
    download.pull(REPO, name)
    last = [r for r in hub.requests if r.method == "GET" and r.path.endswith(name)][-1]
    assert last.range == f"bytes={kept}-" and last.sent == size - kept


def test_corrupted_body_is_rejected_and_not_registered(hub, smol_paths):
    name = smol_paths[1].name
    hub.corrupt.add(name)
    with pytest.raises(ChecksumError, match="sha256"):
        download.pull(REPO, name)
    home = Path(os.environ["TANDEM_HOME"])
    assert not (home / "models" / name).exists()
    assert not list((home / "downloads" / "partial").glob("*"))
    assert all(r["source"] != "hub" for r in library.installed())


def test_missing_file_gated_repo_and_no_network_have_clear_messages(hub, monkeypatch):
    with pytest.raises(DownloadError, match=r"not in tandem-test/smollm2-gguf \(HTTP 404\)"):
        download.pull(REPO, "no-such-file.gguf")
    with pytest.raises(DownloadError, match=r"gated repository \(HTTP 401\).*hf auth login"):
        download.pull("tandem-test/gated", "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setenv("HF_TOKEN", "hf_not_allowed")
    with pytest.raises(DownloadError, match=r"gated repository \(HTTP 403\)"):
        download.pull("tandem-test/gated", "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(DownloadError, match="cannot reach the Hub"):
        download.pull(REPO, "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_header_only_check_reads_a_small_part_of_the_file(hub, smol_paths, gemma_paths):
    cat = Catalog(models={
        "remote-smol": ModelEntry("remote-smol", "smol", "smollm2", smol_paths[1].name, repo=REPO),
        "remote-gemma": ModelEntry("remote-gemma", "gemma", "gemma3", gemma_paths[1].name,
                                   repo="tandem-test/gemma-gguf"),
    })
    size = smol_paths[1].stat().st_size
    v = compat.check_pair(str(smol_paths[0]), "remote-smol", cat=cat)
    assert v.ok and v.draft.where == "hub header"
    assert 0 < v.draft.bytes_read < size // 20
    assert hub.bytes_sent(smol_paths[1].name) < size // 20
    again = compat.check_pair(str(smol_paths[0]), "remote-smol", cat=cat)  # kept copy: no new bytes
    assert again.ok and again.draft.bytes_read == 0
    bad = compat.check_pair(str(smol_paths[0]), "remote-gemma", cat=cat)
    assert not bad.ok and "vocabulary type differs" in bad.reason
    assert hub.bytes_sent(gemma_paths[1].name) < gemma_paths[1].stat().st_size // 10
    assert not (Path(os.environ["TANDEM_HOME"]) / "models" / smol_paths[1].name).exists()


def test_cli_pull_list_and_check(hub, smol_paths, gemma_paths):
    env = dict(os.environ)

    def run(*args):
        return subprocess.run([sys.executable, str(ROOT / "launcher.py"), "models", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True)

    name = smol_paths[1].name
    out = run("pull", REPO, name)
    assert out.returncode == 0, out.stderr
    listed = json.loads(run("list", "--json").stdout)["models"]
    rec = next(r for r in listed if r["path"].endswith(name))
    assert rec["id"] and rec["meta"]["n_vocab"] == 49152
    bad = run("check", str(smol_paths[0]), str(gemma_paths[1]))
    assert bad.returncode == 1 and "INCOMPATIBLE" in bad.stdout
    missing = run("pull", REPO, "nope.gguf")
    assert missing.returncode == 2 and "HTTP 404" in missing.stderr  # known errors: one line, exit 2
