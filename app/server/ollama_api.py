"""Ollama's API over the same runner as the OpenAI-compatible one: ``GET /api/version``, ``GET /api/tags``,
``GET /api/ps``, ``POST /api/show``, ``POST /api/chat``, ``POST /api/generate``, so tools that speak only Ollama
connect to Tandem.

A chat or generate body is translated into the OpenAI request it means (``ollama_format``) and run by
:meth:`OpenAIApi.prepare`: the same checks, prompt, tools, grammar (``format``: ``"json"`` or a JSON schema), the
same Guard (Host, Origin, API key as ``Authorization: Bearer``, which the ``ollama`` client sends from
``OLLAMA_API_KEY``, body size) and the same generation lock, first come first served. As Ollama, replies stream
as NDJSON unless ``"stream": false``; the last object carries done_reason and the durations in nanoseconds, and
Tandem's speculative figures under ``tandem``. Errors are Ollama's ``{"error": "..."}`` with the status.
"""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator, Optional

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from app.chat.toolparse import ContentDelta, Delta, ToolCallDelta
from app.engine.errors import TandemError
from app.server import ollama_format as O
from app.server.openai_api import IGNORED_HEADER, OpenAIApi
from app.server.openai_run import Run, RunStream
from app.server.openai_schema import RequestError, request_error
from app.service import switch

ROUTES = {"/api/version": ("GET",), "/api/tags": ("GET",), "/api/ps": ("GET",), "/api/show": ("POST",),
          "/api/chat": ("POST",), "/api/generate": ("POST",)}
NDJSON = "application/x-ndjson"


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


class OllamaApi:
    """The routes, bound to the OpenAI API object (its state, guard, key, metrics and request preparation)."""

    def __init__(self, api: OpenAIApi):
        self.api = api

    def router(self) -> APIRouter:
        r = APIRouter()
        r.add_api_route("/api/version", self.version, methods=["GET", "HEAD"], include_in_schema=False)
        r.add_api_route("/api/tags", self.tags, methods=["GET", "HEAD"], include_in_schema=False)
        r.add_api_route("/api/ps", self.ps, methods=["GET"], include_in_schema=False)
        r.add_api_route("/api/show", self.show, methods=["POST"], include_in_schema=False)
        r.add_api_route("/api/chat", self.chat, methods=["POST"], include_in_schema=False)
        r.add_api_route("/api/generate", self.generate, methods=["POST"], include_in_schema=False)
        return r

    # --- the model a request names ------------------------------------------------------------------------

    def resolve(self, name: str) -> Optional[switch.Installed]:
        """None for the loaded pair, else the installed pair ``name`` names (the same resolution as /v1's):
        RequestError 400 without a name, 404 (Ollama's words) for a model that is not here."""
        if not name.strip():
            raise RequestError("model is required", param="model")
        try:
            return self.api.choice.resolve(name, self.api.model_id())
        except switch.UnknownModel:
            raise RequestError(f"model '{name}' not found", param="model", status=404) from None

    def listed(self) -> str:
        return f"{self.api.model_id()}:latest"

    def _refused(self, request: Request) -> Optional[Response]:
        denied = self.api.denied(request)
        if denied is None:
            return None
        body = json.loads(bytes(denied.body))
        resp = _error(body["error"]["message"], denied.status_code)
        resp.headers.update({k: v for k, v in denied.headers.items() if k.lower() == "www-authenticate"})
        return resp

    # --- listings -----------------------------------------------------------------------------------------

    async def version(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse({"version": O.VERSION})

    async def tags(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        state = self.api.state
        loaded = [O.tag_entry(self.listed(), state.pair)] if state.pair is not None else []
        others = [O.installed_entry(f"{p.id}:latest", p.files) for p in switch.installed_pairs()
                  if state.pair is None or p.id != state.pair_id]
        return JSONResponse({"models": loaded + others})  # the loaded pair first; the others load on request

    async def ps(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        pair = self.api.state.pair
        if pair is None:
            return JSONResponse({"models": []})
        entry = O.tag_entry(self.listed(), pair)
        entry.update(expires_at="9999-12-31T23:59:59Z", size_vram=0, context_length=pair.target.n_ctx)
        return JSONResponse({"models": [entry]})

    async def show(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        try:
            body = O.parse(O.ShowBody, await self.api.guard.body(request))
            want = self.resolve(body.model or body.name or "")
        except TandemError as exc:  # a bad body, the body too big, an unknown model
            err = request_error(exc)
            return _error(str(err), err.status)
        if want is not None and not want.is_loaded(self.api.state):  # its header's facts: showing loads nothing
            return JSONResponse(O.show_installed(want.target, want.draft))
        pair = self.api.state.pair
        if pair is None:
            return _error(self.api.state.load_error or "no pair is loaded yet", 503)
        caps = ["completion", "tools"]  # a template that knows no tools gets llama.cpp's generic fallback
        if not pair.target.fim_tokens().missing():
            caps.append("insert")
        return JSONResponse(O.show(pair, self.api.state.describe_pair(), caps))

    # --- generation ---------------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        return await self._run(request, "chat")

    async def generate(self, request: Request) -> Response:
        return await self._run(request, "generate")

    async def _run(self, request: Request, endpoint: str) -> Response:
        t0 = time.perf_counter()
        status, run, streaming = 200, None, False

        def record() -> None:
            self.api.metrics.request(f"ollama.{endpoint}", status, time.perf_counter() - t0,
                                     run.prompt_tokens if run else 0)

        try:
            refused = self._refused(request)
            if refused:
                status = refused.status_code
                return refused
            body = O.parse(O.ChatBody if endpoint == "chat" else O.GenerateBody, await self.api.guard.body(request))
            ticket = await self.api.choice.enter(self.resolve(body.model), request, self.api.guard.drain.refusal)
            if ticket is None:
                status = 499
                return Response(status_code=499)
            try:  # the named pair is loaded and stays so until this request holds the generation lock
                base = {"model": self.listed(), "created_at": O.stamp()}
                headers = {IGNORED_HEADER: ", ".join(O.ignored(body))[:2000]} if O.ignored(body) else {}
                if self.api.state.pair is None:
                    raise RequestError(self.api.state.load_error or "no pair is loaded yet", status=503)
                if O.empty(body):
                    return JSONResponse(O.loaded(base, endpoint), headers=headers)  # Ollama's "load the model"
                kind, openai = self._translate(body, endpoint)
                run, _ = self.api.prepare(json.dumps(openai).encode(), kind)
                self.api.guard.drain.track(run.stop)
                began = await run.begin(request)
            finally:
                self.api.choice.leave(ticket)
            if not began:
                status = 499
                return Response(status_code=499)
            if body.stream is not False:
                streaming = True
                return RunStream(run, self._lines(run, endpoint, base, t0), on_end=record, headers=headers,
                                 media_type=NDJSON)
            if not await run.drain(request):
                status = 499
                return Response(status_code=499)
            reply = run.parsed()
            calls = [O.call_json(i, c) for i, c in enumerate(reply.tool_calls)]
            first = O.chat_chunk(base["model"], reply.content, calls) if endpoint == "chat" \
                else O.generate_chunk(base["model"], run.text)
            first["created_at"] = base["created_at"]
            return JSONResponse(O.final(first, run.finish_reason(), run.extras(), t0), headers=headers)
        except Exception as exc:  # a refusal, a limit, or a fault: Ollama's {"error": ...}, never a traceback
            err = request_error(exc)
            status = err.status
            return _error(str(err), status)
        finally:
            if run is not None and not streaming:
                run.close()
            if not streaming:
                record()

    def _translate(self, body: Any, endpoint: str) -> tuple[str, dict]:
        """("chat" or "text", the OpenAI request the Ollama body means, for the loaded pair)."""
        pair = self.api.state.pair
        n_ctx = pair.target.n_ctx if pair is not None else 1
        if endpoint == "chat":
            return "chat", O.chat_request(body, n_ctx)
        return O.generate_request(body, n_ctx)

    async def _lines(self, run: Run, endpoint: str, base: dict, t0: float) -> AsyncIterator[str]:
        model = base["model"]
        try:
            for line in _pieces(run, endpoint, model):
                yield line
            while await run.pull():
                for line in _pieces(run, endpoint, model):
                    yield line
            for line in _pieces(run, endpoint, model):
                yield line
            last = O.chat_chunk(model, "") if endpoint == "chat" else O.generate_chunk(model, "")
            yield _line(O.final(last, run.finish_reason(), run.extras(), t0))
        except (RequestError, TandemError) as exc:  # the response has started: the error as a line, as Ollama
            yield _line({"error": str(exc)})


def _pieces(run: Run, endpoint: str, model: str) -> list[str]:
    """The NDJSON lines for what the generation released since the last call: text, or whole tool calls."""
    piece = run.piece()
    if endpoint != "chat":
        return [_line(O.generate_chunk(model, piece))] if piece else []
    out = []
    for d in _deltas(run, piece):
        if isinstance(d, ContentDelta) and d.text:
            out.append(_line(O.chat_chunk(model, d.text)))
        elif isinstance(d, ToolCallDelta):
            out.append(_line(O.chat_chunk(model, "", [O.call_json(d.index, d.call)])))
    return out


def _deltas(run: Run, piece: str) -> list[Delta]:
    """A released piece read for tool calls (whole calls: Ollama streams a call in one object)."""
    if run.parser is None:
        return [ContentDelta(piece)] if piece else []
    found = run.parser.feed(piece) if piece else []
    if run.over:
        rest, run.reply = run.parser.finish()
        found += rest
    return found


def mount(app: FastAPI, api: OpenAIApi) -> OllamaApi:
    """Add Ollama's routes beside the OpenAI API's (same state, same checks)."""
    ollama = OllamaApi(api)
    app.include_router(ollama.router())
    return ollama
