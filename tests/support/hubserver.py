"""A local stand-in for the Hugging Face Hub on 127.0.0.1, speaking the protocol huggingface_hub uses:

* ``HEAD``/``GET /{repo}/resolve/{revision}/{file}`` with ``ETag``, ``X-Repo-Commit``, ``X-Linked-Size``,
  ``Accept-Ranges`` and ``Range`` (206 + ``Content-Range``);
* ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` with ``siblings`` whose ``lfs`` carries
  ``sha256``, ``size`` and ``pointerSize`` (what ``HfApi.model_info(files_metadata=True)`` reads);
* errors as the Hub sends them: ``X-Error-Code: EntryNotFound`` (404), ``RepoNotFound`` (401),
  ``GatedRepo`` (401 without a token, 403 with a token that has no access).

Faults for tests: ``corrupt`` (flip bytes in the body, headers unchanged) and ``drop_after`` (close the
connection after N body bytes, once). Every request is recorded with the bytes it was sent.

Usage::

    with HubServer() as hub:
        hub.add("org/repo", "model.gguf", path)
        os.environ["HF_ENDPOINT"] = hub.url
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class HubFile:
    path: Path
    size: int
    sha256: str


@dataclass
class Repo:
    files: dict[str, HubFile] = field(default_factory=dict)
    gated: bool = False
    allowed_tokens: tuple[str, ...] = ()


@dataclass
class Request:
    method: str
    path: str
    range: Optional[str]
    status: int
    sent: int = 0


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.corrupt: set[str] = set()  # file names served with flipped bytes
        self.drop_after: dict[str, int] = {}  # file name -> body bytes before the connection is cut (once)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo: str, filename: str, path: Path, gated: bool = False,
            allowed_tokens: tuple[str, ...] = ()) -> HubFile:
        path = Path(path)
        digest = _sha256(path)
        r = self.repos.setdefault(repo, Repo())
        r.gated = r.gated or gated
        r.allowed_tokens = r.allowed_tokens or allowed_tokens
        r.files[filename] = HubFile(path, path.stat().st_size, digest)
        return r.files[filename]

    def bytes_sent(self, filename: str, method: str = "GET") -> int:
        return sum(r.sent for r in self.requests if r.method == method and r.path.endswith("/" + filename))

    def __enter__(self) -> "HubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


_hash_cache: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _hash_cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        _hash_cache[key] = h.hexdigest()
    return _hash_cache[key]


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _record(self, status: int, sent: int = 0) -> None:
            with hub._lock:
                hub.requests.append(Request(self.command, urlparse(self.path).path, self.headers.get("Range"),
                                            status, sent))

        def _error(self, status: int, code: str, message: str = "") -> None:
            body = json.dumps({"error": message or code}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            if message:
                self.send_header("X-Error-Message", message)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self._record(status)

        def _access(self, repo: Optional[Repo]) -> bool:
            if repo is None:
                self._error(401, "RepoNotFound", "Repository not found")
                return False
            if repo.gated:
                auth = self.headers.get("Authorization", "")
                token = auth.removeprefix("Bearer ").strip()
                if not token:
                    self._error(401, "GatedRepo", "Access to model is restricted. You must be authenticated.")
                    return False
                if token not in repo.allowed_tokens:
                    self._error(403, "GatedRepo", "Access to model is restricted and you are not in the list.")
                    return False
            return True

        def _serve(self, body: bool) -> None:
            path = unquote(urlparse(self.path).path)
            if path.startswith("/api/models/"):
                return self._api(path[len("/api/models/"):])
            if "/resolve/" not in path:
                return self._error(404, "NotFound")
            repo_id, _, rest = path.lstrip("/").partition("/resolve/")
            _revision, _, filename = rest.partition("/")
            repo = hub.repos.get(repo_id)
            if not self._access(repo):
                return None
            f = repo.files.get(filename)
            if f is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            start, end, status = 0, f.size - 1, 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, _, b = rng[len("bytes="):].partition("-")
                start = int(a) if a else 0
                end = min(int(b), f.size - 1) if b else f.size - 1
                if start >= f.size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{f.size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return self._record(416)
                status = 206
            length = end - start + 1
            self.send_response(status)
            self.send_header("ETag", f'"{f.sha256}"')
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Size", str(f.size))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
            self.end_headers()
            if not body:
                return self._record(status)
            with hub._lock:
                cut = hub.drop_after.pop(filename, None)
            sent = 0
            with open(f.path, "rb") as src:
                src.seek(start)
                while sent < length:
                    chunk = src.read(min(1 << 16, length - sent))
                    if not chunk:
                        break
                    if filename in hub.corrupt:
                        chunk = bytes(b ^ 0xFF for b in chunk[:16]) + chunk[16:]
                    if cut is not None and sent + len(chunk) > cut:
                        chunk = chunk[:max(0, cut - sent)]
                        self.wfile.write(chunk)
                        sent += len(chunk)
                        self._record(status, sent)
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return None
                    self.wfile.write(chunk)
                    sent += len(chunk)
            self._record(status, sent)
            return None

        def _api(self, rest: str) -> None:
            repo_id = rest.split("/revision/")[0].strip("/")
            repo = hub.repos.get(repo_id)
            if not self._access(repo):
                return None
            siblings = [{"rfilename": name, "size": f.size, "blobId": f.sha256[:40],
                         "lfs": {"sha256": f.sha256, "size": f.size, "pointerSize": 134}}
                        for name, f in repo.files.items()]
            data = json.dumps({"id": repo_id, "modelId": repo_id, "sha": COMMIT, "private": False,
                               "gated": "auto" if repo.gated else False, "siblings": siblings}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self._record(200, len(data))
            return None

    return Handler
