"""What a trusted local server checks before any work (llama.cpp's server and Ollama do the same):

- **Origin**: a browser page on another site can POST to a loopback server (a ``text/plain`` body needs no
  preflight). A request whose ``Origin`` is not loopback, not the server's own origin (the UI's page) and not
  in the allow-list (``--allow-origin``, ``TANDEM_ALLOW_ORIGINS``; ``*`` allows any) gets 403.
- **Host**: without an API key (loopback serving) a ``Host`` header other than a loopback name or the bound
  host gets 403, which stops DNS rebinding. With a key, the key is the check.
- **Body size**: a body over ``max_body`` bytes (8 MiB by default; ``--max-body-mib``, ``TANDEM_MAX_BODY_MIB``)
  gets 413 at once: from ``Content-Length`` before a byte is read, or as soon as a chunked body crosses it.

The API's routes check all three (``Guard.refusal``). The app's own routes (Gradio's page, ``/config``, uploads,
the queue, files) get the Host and Origin checks from :class:`Protect`, a middleware around the whole server
that calls the same ``Guard.forbidden``: there the Host is checked unless the app is served beyond loopback with
a login (``--auth``), which is then the check, as a key is for the API (:func:`page`).

Every refusal is an OpenAI-shaped error body.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import urlsplit

from fastapi import Request
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.engine.errors import TandemError
from app.server.openai_format import error_body

MAX_BODY = 8 << 20
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "0:0:0:0:0:0:0:1"})


class Refused(TandemError):
    """A request refused before any work: the wrong origin or host (403) or too big (413)."""

    status = 403
    code = "forbidden"


def _hostname(netloc: str) -> str:
    try:
        return (urlsplit("//" + netloc).hostname or "").lower()
    except ValueError:
        return ""


class Drain:
    """Shutting down (SIGTERM, SIGINT): new and queued requests get 503, running generations stop at their
    next step. ``track`` registers a request's stop switch; ``shut`` flips them all."""

    def __init__(self) -> None:
        self.closing = threading.Event()
        self._stops: Any = weakref.WeakSet()

    def track(self, stop: threading.Event) -> None:
        self._stops.add(stop)
        if self.closing.is_set():
            stop.set()

    def shut(self) -> None:
        self.closing.set()
        for stop in list(self._stops):
            stop.set()

    def refusal(self) -> Optional[Refused]:
        if not self.closing.is_set():
            return None
        return Refused("the server is shutting down; try again when it is back", status=503, code="shutting_down")


@dataclass(frozen=True)
class Guard:
    host: Optional[str] = None  # the bound host; None: loopback
    allow_origins: tuple[str, ...] = ()
    max_body: int = MAX_BODY
    check_host: bool = True
    hosts: frozenset = field(default=frozenset(), init=False)
    drain: Drain = field(default_factory=Drain, compare=False)

    def __post_init__(self) -> None:
        extra = {self.host.lower()} if self.host and self.host not in ("0.0.0.0", "::") else set()
        object.__setattr__(self, "hosts", LOOPBACK_NAMES | extra)

    def refusal(self, request: Request) -> Optional[Refused]:
        """The reason to refuse ``request`` before reading its body, or None."""
        closing = self.drain.refusal()
        if closing is not None:
            return closing
        forbidden = self.forbidden(request.headers)
        if forbidden is not None:
            return forbidden
        length = request.headers.get("content-length", "")
        if length.strip().isdigit() and int(length) > self.max_body:
            return self.too_big(int(length))
        return None

    def forbidden(self, headers: Mapping[str, str]) -> Optional[Refused]:
        """403 for a request addressed to another Host (DNS rebinding) or sent by a page of another Origin, else
        None: the one decision the API's routes and :class:`Protect` (every other route) share."""
        host = headers.get("host", "")
        if self.check_host and _hostname(host) not in self.hosts:
            return Refused(f"Host {host[:80]!r} is not this server: requests must be addressed to "
                           "127.0.0.1 or localhost")
        origin = headers.get("origin")
        if origin is not None and not self.origin_ok(origin, host):
            return Refused(f"cross-origin request from {origin[:80]!r} refused; allow it with --allow-origin "
                           "or TANDEM_ALLOW_ORIGINS")
        return None

    def origin_ok(self, origin: str, host: str) -> bool:
        if "*" in self.allow_origins or origin.rstrip("/") in self.allow_origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):
            return False
        return (parts.hostname or "").lower() in LOOPBACK_NAMES or parts.netloc.lower() == host.lower()

    def too_big(self, n: Optional[int] = None) -> Refused:
        got = f"{n} bytes" if n is not None else "more"
        return Refused(f"the request body is {got}; at most {self.max_body} bytes are taken "
                       "(--max-body-mib, TANDEM_MAX_BODY_MIB)", status=413, code="request_too_large")

    async def body(self, request: Request) -> bytes:
        """The body, read with a cap: Refused (413) as soon as it crosses ``max_body``."""
        chunks, n = [], 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > self.max_body:
                raise self.too_big()
            chunks.append(chunk)
        return b"".join(chunks)


def origins(given: Iterable[str] = ()) -> tuple[str, ...]:
    """The allow-list: ``--allow-origin`` values and ``TANDEM_ALLOW_ORIGINS`` (comma separated)."""
    env = [o.strip() for o in os.environ.get("TANDEM_ALLOW_ORIGINS", "").split(",")]
    return tuple(o.rstrip("/") for o in [*given, *env] if o and o.strip())


def max_body(mib: Optional[float] = None) -> int:
    """Bytes from ``--max-body-mib`` or ``TANDEM_MAX_BODY_MIB`` (default 8 MiB)."""
    if mib is None:
        from app.engine import limits

        mib = limits.env_number("TANDEM_MAX_BODY_MIB", MAX_BODY / (1 << 20), "body_mib")
    return int(mib * (1 << 20))


def make(host: Optional[str], api_key: Optional[str], allow: Iterable[str] = (),
         mib: Optional[float] = None) -> Guard:
    return Guard(host=host, allow_origins=origins(allow), max_body=max_body(mib), check_host=not api_key)


def page(host: Optional[str], auth: bool, allow: Iterable[str] = ()) -> Guard:
    """The checks for the app's own routes: Origin always; Host unless the app is served beyond loopback with
    a login (``--auth``), where the machine's names are not known beforehand and the login is the check (an
    attacker's page cannot hold the login cookie of this server's origin)."""
    beyond = (host or "127.0.0.1").lower() not in LOOPBACK_NAMES
    return Guard(host=host, allow_origins=origins(allow), check_host=not (auth and beyond))


class Protect:
    """ASGI middleware around the whole server: every HTTP request and WebSocket handshake passes
    ``checks.forbidden`` before any route sees it, or gets 403 naming the refused Host or Origin. Paths in
    ``api_paths`` (a trailing ``/``: the paths under it) take ``api.forbidden`` instead, the rule their own
    routes apply (with a key the key is the check), so the API answers exactly as it does on its own."""

    def __init__(self, app: ASGIApp, checks: Guard, api: Optional[Guard] = None,
                 api_paths: Iterable[str] = ()) -> None:
        self.app, self.checks, self.api = app, checks, api
        paths = tuple(api_paths)
        self.exact = frozenset(p for p in paths if not p.endswith("/"))
        self.prefixes = tuple(p for p in paths if p.endswith("/"))

    def rule(self, path: str) -> Guard:
        if self.api is not None and (path in self.exact or path.startswith(self.prefixes)):
            return self.api
        return self.checks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        refused = self.rule(scope.get("path", "")).forbidden(Headers(scope=scope))
        if refused is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":  # closed before accept: the server answers the handshake 403
            await send({"type": "websocket.close", "code": 1008, "reason": str(refused)[:120]})
        else:
            body = error_body(str(refused), code=refused.code)
            await JSONResponse(body, status_code=refused.status)(scope, receive, send)


def protect(checks: Guard, api: Optional[Guard] = None, api_paths: Iterable[str] = ()) -> Middleware:
    """:class:`Protect` as a Starlette middleware entry, e.g. for ``FastAPI(middleware=[...])``, so it is in place
    before the server answers its first request."""
    return Middleware(Protect, checks=checks, api=api, api_paths=tuple(api_paths))
