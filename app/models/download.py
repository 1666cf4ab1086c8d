"""Downloads from the Hugging Face Hub through ``huggingface_hub`` (so ``HF_ENDPOINT``, ``HF_TOKEN`` and
``hf auth login`` apply): progress in the terminal and to a callback, resume of an interrupted download, cancel,
a free-disk check first, and size + sha256 checked against the Hub's file metadata before a file is registered.

The partial file lives in the downloads directory under a name tied to the file's ETag, so a later pull resumes
it with an HTTP Range request (and a changed file on the Hub starts afresh); only a verified file is moved
into the models directory.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import psutil

from app.engine.errors import TandemError
from app import paths
from app.models import fileops, library
from app.models.catalog import ModelEntry
from app.models.fileops import ChecksumError, DiskFullError, Progress

PARTIAL_SUFFIX = ".incomplete"


class DownloadError(TandemError, RuntimeError):
    """A download failed; the message says why and what to do. Nothing half-done is registered."""


class Cancelled(DownloadError):
    pass


def endpoint() -> str:
    """The Hub to use: ``HF_ENDPOINT`` as set now (huggingface_hub reads it only once, at import)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def explain(exc: BaseException, repo: str, filename: str = "") -> DownloadError:
    """A clear message for an error raised by huggingface_hub or the network."""
    from huggingface_hub import errors

    what = f"{repo}/{filename}" if filename else repo
    login = ("Accept the model's terms on its Hub page, then log in with `hf auth login` or set HF_TOKEN "
             "to a token that can read it.")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, errors.GatedRepoError):
        return DownloadError(f"{repo} is a gated repository (HTTP {status}): you need access. {login}")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return DownloadError(f"repository {repo} was not found, or it is private (HTTP {status}). "
                             f"Check the id; if it is private, {login[0].lower() + login[1:]}")
    if isinstance(exc, errors.RevisionNotFoundError):
        return DownloadError(f"{what}: that revision does not exist (HTTP {status})")
    if isinstance(exc, errors.EntryNotFoundError):
        return DownloadError(f"{filename or 'the file'} is not in {repo} (HTTP 404). Check the file name "
                             "(names are case-sensitive).")
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return DownloadError(f"cannot fetch {what}: HF_HUB_OFFLINE is set. Installed models still work.")
    if isinstance(exc, errors.HfHubHTTPError):
        return DownloadError(f"the Hub refused {what}: {str(exc).splitlines()[0]}")
    return DownloadError(f"cannot reach the Hub at {endpoint()} for {what} ({type(exc).__name__}: {exc}). "
                         "Check the network; installed models keep working.")


def _is_network_error(exc: BaseException) -> bool:
    from huggingface_hub import errors

    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - older huggingface_hub
        import httpx  # type: ignore[no-redef]
    return isinstance(exc, (httpx.TransportError, errors.HfHubHTTPError, errors.OfflineModeIsEnabled,
                            errors.FileMetadataError, OSError))


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    filename: str
    revision: str
    url: str  # where the bytes are (after the Hub's redirect)
    size: int
    etag: str
    commit: str
    sha256: Optional[str]  # from the Hub's LFS metadata


def remote_file(repo: str, filename: str, revision: str = "main") -> RemoteFile:
    """HEAD the file and read the repository's file metadata (size, sha256) from the Hub's API."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    ep = endpoint()
    try:
        url = hf_hub_url(repo, filename, revision=revision, endpoint=ep)
        head = get_hf_file_metadata(url, endpoint=ep)
        info = HfApi(endpoint=ep).model_info(repo, revision=head.commit_hash or revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - mapped to a clear message, re-raised as DownloadError
        if _is_network_error(exc):
            raise explain(exc, repo, filename) from exc
        raise
    sibling = next((s for s in (info.siblings or []) if s.rfilename == filename), None)
    sha = sibling.lfs.sha256 if sibling is not None and sibling.lfs else None
    size = head.size if head.size is not None else (sibling.size if sibling else None)
    if size is None:
        raise DownloadError(f"the Hub gave no size for {repo}/{filename}; cannot check the download")
    return RemoteFile(repo, filename, revision, head.location, int(size), head.etag or "", head.commit_hash or "",
                      sha)


_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def check_repo_file(repo: str, filename: str) -> None:
    """DownloadError unless ``repo`` is a Hub repository id (``owner/name``) and ``filename`` a ``.gguf`` path
    inside it: no ``..``, no absolute path, no control characters (``models pull ../x f`` is refused here)."""
    if not isinstance(repo, str) or not _REPO.fullmatch(repo) or ".." in repo:
        raise DownloadError(f"{str(repo)[:80]!r} is not a Hub repository id: give owner/name, for example "
                            "bartowski/SmolLM2-135M-Instruct-GGUF")
    parts = str(filename).replace("\\", "/").split("/")
    if (not filename or str(filename).startswith("/") or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 for c in str(filename)) or not str(filename).lower().endswith(".gguf")):
        raise DownloadError(f"{str(filename)[:80]!r} is not a .gguf file of the repository: give its path "
                            "there, for example model-Q4_K_M.gguf")


def partial_path(rf: RemoteFile) -> Path:
    tag = "".join(c for c in rf.etag if c.isalnum())[:16] or "noetag"
    return paths.sub("downloads/partial") / f"{library.slug(rf.repo)}--{library.slug(rf.filename)}.{tag}{PARTIAL_SUFFIX}"


def pull(repo: str, filename: str, revision: str = "main", progress: Optional[Progress] = None,
         cancel: Optional[threading.Event] = None, model_id: Optional[str] = None,
         expected_sha256: Optional[str] = None) -> Path:
    """Download ``repo/filename`` into the models directory (resuming a partial download), verify it and
    register it. Returns the model's path; instant when it is already there."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    check_repo_file(repo, filename)
    dest = paths.models_dir() / Path(filename).name
    model_id = model_id or library.slug(Path(filename).stem)
    paths.clean_stale_downloads()
    if fileops.is_done(dest):
        return dest
    rf = remote_file(repo, filename, revision)
    want_sha = rf.sha256 or expected_sha256
    part = partial_path(rf)
    have = part.stat().st_size if part.exists() else 0
    if have > rf.size:
        part.unlink()
        have = 0
    free = psutil.disk_usage(str(paths.models_dir())).free
    need = rf.size - have + (64 << 20)
    if free < need:
        raise DiskFullError(f"not enough disk space for {filename}: need {need / 1e9:.2f} GB more, "
                            f"{free / 1e9:.2f} GB free in {paths.models_dir()}")
    tqdm_class = _progress_class(progress, cancel)
    if have < rf.size:
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"
        try:
            with open(part, "ab") as f, fileops.staged(f"downloading {Path(filename).name}"):
                http_get(rf.url, f, resume_size=have, headers=headers, expected_size=rf.size,
                         displayed_filename=Path(filename).name, tqdm_class=tqdm_class)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001
            if _is_network_error(exc):
                done = part.stat().st_size if part.exists() else 0
                raise DownloadError(f"{explain(exc, repo, filename)} ({done} of {rf.size} bytes kept; "
                                    "pull again to resume)") from exc
            raise
    _verify(part, rf, want_sha, progress)
    _check_model(part, filename)
    digest = want_sha or fileops.sha256_file(part, f"hashing {filename}")
    with library.locked():  # placed and recorded together: no other process sees the file without its record
        os.replace(part, dest)
        fileops.mark_done(dest, digest)
        library.register(model_id, dest, "hub", repo=repo, file=filename, commit=rf.commit, sha256=want_sha)
    return dest


def _verify(part: Path, rf: RemoteFile, sha: Optional[str], progress: Optional[Progress]) -> None:
    size = part.stat().st_size
    if size != rf.size:
        part.unlink(missing_ok=True)
        raise ChecksumError(f"{rf.filename}: got {size} bytes, the Hub says {rf.size}; the download was "
                            "discarded, pull again")
    if sha:
        digest = fileops.sha256_file(part, f"verifying {rf.filename}", progress)
        if digest != sha:
            part.unlink(missing_ok=True)
            raise ChecksumError(f"{rf.filename}: sha256 {digest[:16]}… does not match the Hub's {sha[:16]}…; "
                                "the corrupted download was discarded and not registered, pull again")


def _check_model(part: Path, filename: str) -> None:
    """Register only a whole GGUF model: its header, tensor table and data sizes must add up."""
    from app.models import meta
    from app.models.ggufheader import GGUFError

    try:
        meta.read(part)
    except GGUFError as exc:
        part.unlink(missing_ok=True)
        raise DownloadError(f"{filename} is not a usable GGUF model ({exc}); it was not installed") from None


def pull_entry(entry: ModelEntry, progress: Optional[Progress] = None,
               cancel: Optional[threading.Event] = None) -> Path:
    """Download a catalog model (``repo`` + ``file``)."""
    if not entry.repo:
        raise DownloadError(f"model {entry.id!r} has no Hub repository in the catalog")
    return pull(entry.repo, entry.file, entry.revision, progress=progress, cancel=cancel, model_id=entry.id,
                expected_sha256=entry.sha256)


def _progress_class(progress: Optional[Progress], cancel: Optional[threading.Event]):
    """A tqdm class that also reports to ``progress`` and stops the download when ``cancel`` is set."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = os.environ.get("TANDEM_QUIET") == "1"
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            self._done = kwargs.get("initial", 0) or 0

        def update(self, n=1):
            if cancel is not None and cancel.is_set():
                raise Cancelled("download cancelled; the part already fetched is kept, pull again to resume")
            self._done += n
            if progress:
                progress(self._done, self.total or 0)
            return super().update(n)

    return Bar
