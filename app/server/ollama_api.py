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
from pathlib import Path
from typing import Any, AsyncIterator, Optional

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from app.chat.toolparse import ContentDelta, Delta, ToolCallDelta
from app.engine.errors import TandemError
from app.models import library
from app.server import ollama_format as O
from app.server.openai_api import IGNORED_HEADER, OpenAIApi
from app.server.openai_run import Run, RunStream
from app.server.openai_schema import RequestError, request_error

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

    def names(self) -> list[str]:
        """Every name the loaded pair answers to: its id (as /v1/models lists it), its target's file, the library
        ids of its target; each also with Ollama's default tag ``:latest``."""
        state = self.api.state
        if state.pair is None:
            return []
        target = state.pair.target.path
        names = [self.api.model_id(), state.pair_id or "", target.name, target.stem]
        names += [rec["id"] for rec in library.installed(with_meta=False) if _same(rec["path"], target)]
        return [n for n in dict.fromkeys(names) if n]

    def resolve(self, name: str) -> Optional[str]:
        """The loaded pair's listed name if ``name`` names it, else None (the one check; a server that loads pairs
        by name grows it here)."""
        wanted = name.strip()
        base = wanted[:-len(":latest")] if wanted.endswith(":latest") else wanted
        return self.listed() if self.api.state.pair is not None and base in self.names() else None

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

    def _model(self, name: str) -> str:
        """The listed name for ``name``; RequestError 400 with none, 404 (Ollama's words) for another model, 503
        before a pair is loaded."""
        if not name.strip():
            raise RequestError("model is required", param="model")
        if self.api.state.pair is None:
            raise RequestError(self.api.state.load_error or "no pair is loaded yet", status=503)
        found = self.resolve(name)
        if found is None:
            raise RequestError(f"model '{name}' not found", param="model", status=404)
        return found

    # --- listings -----------------------------------------------------------------------------------------

    async def version(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse({"version": O.VERSION})

    async def tags(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        pair = self.api.state.pair
        return JSONResponse({"models": [O.tag_entry(self.listed(), pair)] if pair is not None else []})

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
            self._model(body.model or body.name or "")
        except TandemError as exc:  # a bad body, the body too big, an unknown model
            err = request_error(exc)
            return _error(str(err), err.status)
        pair = self.api.state.pair
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
            body, kind, openai = self._translate(await self.api.guard.body(request), endpoint)
            base = {"model": self._model(body.model), "created_at": O.stamp()}
            headers = {IGNORED_HEADER: ", ".join(O.ignored(body))[:2000]} if O.ignored(body) else {}
            if O.empty(body):
                return JSONResponse(O.loaded(base, endpoint), headers=headers)  # Ollama's "load the model"
            run, _ = self.api.prepare(json.dumps(openai).encode(), kind)
            self.api.guard.drain.track(run.stop)
            if not await run.begin(request):
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

    def _translate(self, raw: bytes, endpoint: str) -> tuple[Any, str, dict]:
        """(the Ollama body, "chat" or "text", the OpenAI request it means)."""
        pair = self.api.state.pair
        n_ctx = pair.target.n_ctx if pair is not None else 1
        if endpoint == "chat":
            chat = O.parse(O.ChatBody, raw)
            return chat, "chat", O.chat_request(chat, n_ctx)
        gen = O.parse(O.GenerateBody, raw)
        kind, openai = O.generate_request(gen, n_ctx)
        return gen, kind, openai

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


def _same(path: str, target: Path) -> bool:
    try:
        return target.resolve() == Path(path).resolve()
    except OSError:
        return False




def mount(app: FastAPI, api: OpenAIApi) -> OllamaApi:
    """Add Ollama's routes beside the OpenAI API's (same state, same checks)."""
    ollama = OllamaApi(api)
    app.include_router(ollama.router())
    return ollama
