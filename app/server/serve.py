"""``launcher.py serve``: the OpenAI-compatible API and ``/metrics`` on their own (no UI), for editors, chat
front-ends and scripts. The same endpoints are also mounted on the UI's server (``launcher.py``).

Loopback by default; any other host needs ``--api-key``, which every ``/v1`` route (and ``/metrics``) then
checks as ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import FastAPI

from app.engine.remote.rpc import LOOPBACK
from app.server import guard as G
from app.server.openai_api import OpenAIApi, openai_errors
from app.server.routes import mount
from app.service.loading import app_state, cache_line, say, startup_pair
from app.service.ports import port_is_free
from app.service.state import AppState

DEFAULT_PORT = 8080
KEEP_ALIVE_S = 5  # an idle or half-open connection is closed after this many seconds
GRACE_S = 3  # seconds a shutdown waits for open responses before closing them
HEADER_S = 10  # a request's headers must be complete this long after they begin (or the connection opened)


def _uvicorn_server() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which on SIGTERM / SIGINT first stops the running generation and answers the
        queued requests 503 (uvicorn alone waits for every open response to finish)."""

        def __init__(self, config: uvicorn.Config, drain: G.Drain):
            super().__init__(config)
            self.drain = drain

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.drain.shut()
            super().handle_exit(sig, frame)

    return Server


def _Server(config: Any, drain: G.Drain) -> Any:
    return _uvicorn_server()(config, drain)


def _protocol() -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        """uvicorn's HTTP/1.1 protocol with a deadline on headers: its keep-alive timer starts only after a
        response, so a connection that opens, or sends half a request, and goes quiet was never closed. The
        deadline is set when a request's headers begin and is not moved by further bytes (a client dribbling
        one byte at a time cannot hold the connection)."""

        _deadline: Optional[Any] = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._deadline = self.loop.call_later(HEADER_S, self._late)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            waiting = self.conn.their_state is h11.IDLE  # the request's headers are not complete yet
            if waiting and self._deadline is None:
                self._deadline = self.loop.call_later(HEADER_S, self._late)
            elif not waiting and self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

        def _late(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def header_deadline_by_default() -> None:
    """Every uvicorn server this process starts with ``http="auto"`` gets the header deadline: the app's own server
    is built by Gradio (``gradio.http_server`` makes its ``uvicorn.Config`` itself), so the default is changed
    where that config is made. Idempotent."""
    import uvicorn

    if getattr(uvicorn.Config.__init__, "_tandem_deadline", False):
        return
    original = uvicorn.Config.__init__

    def init(self: Any, app: Any, *args: Any, **kwargs: Any) -> None:
        if not args and kwargs.get("http", "auto") == "auto":  # Gradio passes keywords only
            kwargs["http"] = _protocol()
        original(self, app, *args, **kwargs)

    init._tandem_deadline = True  # type: ignore[attr-defined]
    uvicorn.Config.__init__ = init  # type: ignore[method-assign]


def check_exposure(host: str, api_key: Optional[str]) -> None:
    """Refuse to serve beyond this machine without a key."""
    if host not in LOOPBACK and not api_key:
        raise SystemExit(f"refusing to serve the API on {host}: anyone on the network could use it. "
                         "Add --api-key KEY, or keep the default 127.0.0.1.")


def build(state: AppState, api_key: Optional[str] = None,
          guard: Optional[G.Guard] = None) -> tuple[FastAPI, OpenAIApi]:
    app = FastAPI(title="Tandem", docs_url=None, redoc_url=None, openapi_url=None)
    openai_errors(app)  # unknown routes and methods: OpenAI-format 404 / 405
    return app, mount(app, state, api_key, guard)


def serve_api(host: str = "127.0.0.1", port: int = DEFAULT_PORT, api_key: Optional[str] = None,
              pair_id: Optional[str] = None, gpu_layers: tuple = ("auto", "auto"), rpc: tuple = (),
              allow_origins: tuple = (), max_body_mib: Optional[float] = None,
              cache_ram_mib: Optional[int] = None) -> int:
    import uvicorn

    check_exposure(host, api_key)
    if not port_is_free(host, port):
        raise SystemExit(f"port {port} on {host} is in use; choose another with --port")
    from app.lab.stores import check_stores

    check_stores()  # a bad store or registered model: one line each on stderr, never a failed start
    state = app_state(gpu_layers, rpc, cache_ram_mib)
    say(cache_line(state.prompt_cache))
    startup_pair(state, pair_id, required=True)  # the API cannot load a pair: without one, serving is pointless
    checks = G.make(host, api_key, allow_origins, max_body_mib)
    app, _ = build(state, api_key, checks)
    shown = "127.0.0.1" if host == "localhost" else host
    if host not in LOOPBACK:
        say(f"WARNING: serving on {host} — reachable from other machines; every request needs the API key.")
    say(f"OpenAI-compatible API on http://{shown}:{port}/v1, Ollama's on http://{shown}:{port}/api  "
        "(metrics: /metrics; Ctrl+C to quit)")
    try:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, http=_protocol(),
                                timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=GRACE_S)
        _Server(config, checks.drain).run()
    finally:
        state.unload()
    return 0
