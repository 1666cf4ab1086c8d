"""The model a request names, for the OpenAI and Ollama routes: resolved to the loaded pair or an installed one
(``service.switch``), which is then loaded on demand while the request waits its turn at the gate.

The wait polls the client: one that goes away leaves its place (a load it started still finishes), and so does a
request met by a shutdown. A request holds its place only until its generation has the generation lock
(``Run.begin``): from then on a load queues on that lock behind it.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import anyio
from fastapi import Request

from app.service import switch
from app.service.state import AppState

POLL_S = 0.25  # seconds between looks at the client while a request waits for a load


def requested(raw: bytes) -> str:
    """The ``model`` string of a JSON body ("" without one, or for a body the request's parser will refuse)."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return ""
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else ""


class Choice:
    """The gate of one server (one AppState), and how a route waits at it."""

    def __init__(self, state: AppState, gate: Optional[switch.Gate] = None):
        self.state = state
        self.gate = gate or switch.Gate(state)

    def resolve(self, name: str, listed: str) -> Optional[switch.Installed]:
        return switch.resolve(self.state, name, listed)

    async def enter(self, want: Optional[switch.Installed], request: Request,
                    refusal: Any = lambda: None) -> Optional[switch.Ticket]:
        """The request's admitted ticket (its pair loaded), or None when the client went away meanwhile.
        ``refusal()`` gives the error to raise instead once the server is shutting down."""
        ticket = self.gate.join(want)
        try:
            while not await anyio.to_thread.run_sync(self.gate.wait, ticket, POLL_S):
                closing = refusal()
                if closing is not None:
                    raise closing
                if await request.is_disconnected():
                    self.gate.leave(ticket)
                    return None
        except BaseException:
            self.gate.leave(ticket)
            raise
        return ticket

    def leave(self, ticket: Optional[switch.Ticket]) -> None:
        if ticket is not None:
            self.gate.leave(ticket)


def entry(pair: switch.Installed) -> dict:
    """``/v1/models``'s entry for an installed pair that is not loaded."""
    return {"id": pair.id, "object": "model", "created": 0, "owned_by": "tandem", "target": pair.target.name,
            "draft": pair.draft.name if pair.draft else None, "loaded": False}
