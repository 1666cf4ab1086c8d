"""Read only the GGUF header of a file on the Hub, with HTTP range requests in growing pieces, so a pair can be
judged (the tokenizer arrays are in the header) and sized before gigabytes are downloaded.

Fetched headers are kept in the downloads directory (a few MB each), keyed by repository and file,
so a verdict is instant and works offline the next time.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from app import paths
from app.models import ggufheader
from app.models.download import DownloadError, endpoint, explain, remote_file
from app.models.ggufheader import Header


@dataclass
class RemoteHeader:
    header: Header
    file_size: int
    bytes_read: int  # bytes fetched over the network this time (0 when it came from the local copy)
    cached: bool


def header_cache(repo: str, filename: str) -> Path:
    key = hashlib.sha256(f"{repo}\0{filename}".encode()).hexdigest()[:20]
    return paths.sub("downloads/headers") / f"{key}.gguf-header"


def cached_header(repo: str, filename: str) -> Optional[RemoteHeader]:
    path = header_cache(repo, filename)
    try:
        raw = path.read_bytes()
        size = int(path.with_suffix(".size").read_text())
        return RemoteHeader(ggufheader.parse(raw), size, 0, True)
    except (OSError, ValueError):
        return None


def fetch_header(repo: str, filename: str, revision: str = "main", use_cache: bool = True) -> RemoteHeader:
    """The header of ``repo/filename``: from the local copy, else with range requests to the Hub."""
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    if use_cache and (hit := cached_header(repo, filename)) is not None:
        return hit
    rf = remote_file(repo, filename, revision)
    session, base = get_session(), build_hf_headers()
    base["Accept-Encoding"] = "identity"

    def fetch(start: int, end: int) -> bytes:
        end = min(end, rf.size)
        if start >= end:
            return b""
        try:
            resp = session.get(rf.url, headers={**base, "Range": f"bytes={start}-{end - 1}"},
                               follow_redirects=True, timeout=60)
            hf_raise_for_status(resp)
        except Exception as exc:  # noqa: BLE001 - mapped to a clear message
            raise explain(exc, repo, filename) from exc
        body = resp.content
        if resp.status_code != 206:
            if resp.status_code == 200 and start == 0:  # the server ignored Range: use the prefix we need
                return body[:end]
            raise DownloadError(f"{endpoint()} did not honour a range request for {filename} "
                                f"(HTTP {resp.status_code})")
        return body

    try:
        header, data = ggufheader.read_prefix(fetch, limit=min(rf.size, 1 << 30))
    except ggufheader.GGUFError as exc:
        raise DownloadError(f"{repo}/{filename}: {exc}") from None
    path = header_cache(repo, filename)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data[:header.data_offset])
    os.replace(tmp, path)
    path.with_suffix(".size").write_text(str(rf.size))
    return RemoteHeader(header, rf.size, len(data), False)
