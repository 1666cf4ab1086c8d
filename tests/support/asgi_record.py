"""An ASGI wrapper that keeps every HTTP request the wrapped app answered (method, path, headers, body, status),
so a test can say what a real client asked of the real server without a proxy in between."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        return json.loads(self.body)


class Recorder:
    def __init__(self, app):
        self.app = app
        self._seen: list[Seen] = []
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body, status = bytearray(), [0]

        async def receive_kept():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def send_kept(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive_kept, send_kept)
        finally:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            with self._lock:
                self._seen.append(Seen(scope["method"], scope["path"], headers, bytes(body), status[0]))

    def seen(self, path: str = "") -> list[Seen]:
        """The requests answered so far (to ``path`` alone, if given), oldest first."""
        with self._lock:
            return [s for s in self._seen if not path or s.path == path]
