"""OpenAI-compatible endpoints — ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` —
and ``GET /metrics`` (Prometheus), as a FastAPI router: mounted on the app's own server (Gradio runs on
FastAPI; the command line hands :func:`mount` to the UI) or served alone by ``launcher.py serve`` (``serve.py``).

Every request runs through the service's runner: it waits its turn on the same generation lock as the tabs and
``/chat`` (first come, first served), builds its prompt the way ``/chat`` does, and a client that goes away
sets the stop switch, so its generation ends within one speculative step and frees the pair. Responses carry
``usage`` and the speculative statistics as LM Studio's ``stats`` and llama.cpp's ``timings``; streamed ones
put them in the final chunk. Errors are OpenAI's JSON ``{"error": {...}}`` with the right status, never a
traceback.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import AsyncIterator, Callable, Optional, cast

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from app.engine import limits
from app.engine.decoding.infillcut import Rules, SuffixStop
from app.server import openai_format as F, openai_schema as schema, openai_tools as T
from app.server import infill
from app.server.model_choice import Choice, entry, requested
from app.server.openai_run import Run, RunStream
from app.server.guard import Guard
from app.service import settings as S
from app.service.metrics import CONTENT_TYPE, Metrics
from app.service.state import AppState
from app.service.switch import installed_pairs

IGNORED_HEADER = "x-tandem-ignored"  # the request fields Tandem did not use, comma-separated
ROUTES = {"/v1/models": ("GET",), "/v1/chat/completions": ("POST",), "/v1/completions": ("POST",),
          "/infill": ("POST",), "/metrics": ("GET",), "/health": ("GET",)}


def _error(exc: schema.RequestError) -> JSONResponse:
    return JSONResponse(F.error_body(str(exc), exc.type, exc.param, exc.code), status_code=exc.status)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _pieces(run: Run, env: F.Envelope) -> list[str]:
    """The chunks for what the generation released since the last call."""
    piece = run.piece()
    if not env.chat:
        lp = run.logprobs("text")
        return [_sse(env.chunk(piece, logprobs=lp))] if piece or lp else []
    out = []
    for delta in run.deltas(piece):
        out.append(_sse(env.chunk(None, delta=delta, logprobs=run.logprobs("chat") if "content" in delta else None)))
    return out


async def _events(run: Run, env: F.Envelope, include_usage: bool) -> AsyncIterator[str]:
    if env.chat:
        yield _sse(env.chunk(None, first=True))  # the role alone, as llama.cpp's first chunk
    try:
        for chunk in _pieces(run, env):
            yield chunk
        while await run.pull():
            for chunk in _pieces(run, env):
                yield chunk
        for chunk in _pieces(run, env):
            yield chunk
        extras = run.extras()
        usage = extras.pop("usage")
        yield _sse(env.chunk(None, run.finish_reason(), **extras))
        if include_usage:
            yield _sse(env.usage_chunk(usage=usage, **extras))
    except schema.RequestError as exc:  # the response has started: report the error in the stream
        yield _sse(F.error_body(str(exc), exc.type, exc.param, exc.code))
    yield "data: [DONE]\n\n"


class OpenAIApi:
    """The routes, bound to one AppState (and so to the generation lock the UI's tabs wait on too)."""

    def __init__(self, state: AppState, api_key: Optional[str] = None, metrics: Optional[Metrics] = None,
                 guard: Optional[Guard] = None):
        self.state, self.api_key = state, (api_key or None)  # an empty key is no key
        self.guard = guard or Guard(check_host=self.api_key is None)  # origin, host, body size (guard.py)
        self.metrics = metrics or Metrics(state)
        self._limiter: Optional[anyio.CapacityLimiter] = None  # threads of queued requests, apart from Gradio's
        self.choice = Choice(state)  # the pair a request names, loaded on demand (model_choice.py)

    def router(self) -> APIRouter:
        r = APIRouter()
        r.add_api_route("/v1/models", self.models, methods=["GET"], include_in_schema=False)
        r.add_api_route("/v1/chat/completions", self.chat, methods=["POST"], include_in_schema=False)
        r.add_api_route("/v1/completions", self.completions, methods=["POST"], include_in_schema=False)
        r.add_api_route("/infill", self.infill, methods=["POST"], include_in_schema=False)
        r.add_api_route("/v1/models/{model_id:path}", self.model, methods=["GET"], include_in_schema=False)
        r.add_api_route("/metrics", self.scrape, methods=["GET"], include_in_schema=False)
        r.add_api_route("/health", self.health, methods=["GET"], include_in_schema=False)
        r.add_api_route("/v1/{rest:path}", self.unknown, include_in_schema=False,
                        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
        return r

    async def unknown(self, request: Request, rest: str = "") -> Response:
        """OpenAI-format 404 (no such route) and 405 (a route, another method) for anything under /v1."""
        return not_found(request)

    async def health(self, request: Request) -> Response:
        """llama.cpp's ``/health``: 200 {"status": "ok"} once a pair is loaded, 503 before (no key needed)."""
        refused = self.guard.refusal(request)
        if refused is not None:
            return _error(schema.RequestError(str(refused), code=refused.code, status=refused.status))
        if self.state.pair is None:
            return _error(schema.RequestError(self.state.load_error or "no pair is loaded yet",
                                              code="model_not_loaded", status=503, type_="server_error"))
        return JSONResponse({"status": "ok"})

    async def model(self, request: Request, model_id: str) -> Response:
        denied = self.denied(request)
        if denied:
            return denied
        found = [m for m in self._models() if m["id"] == model_id]
        if not found:  # another name of a listed pair (a catalog id, a file name): that pair's entry
            try:
                pair = self.choice.resolve(model_id, self.model_id())
            except Exception as exc:
                return _error(schema.request_error(exc))
            listed = self.model_id() if pair is None else pair.id
            found = [m for m in self._models() if m["id"] == listed]
        if not found:
            return _error(schema.RequestError(f"the model {model_id!r} does not exist", param="model",
                                              code="model_not_found", status=404))
        return JSONResponse(found[0])

    def denied(self, request: Request) -> Optional[JSONResponse]:
        refused = self.guard.refusal(request)
        if refused is not None:
            return _error(schema.RequestError(str(refused), code=refused.code, status=refused.status))
        if self.api_key is None:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            return None
        err = schema.RequestError("missing or incorrect API key: send the header 'Authorization: Bearer <key>'",
                                  code="invalid_api_key", status=401)
        resp = _error(err)
        resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    def model_id(self) -> str:
        s = self.state
        return s.pair_id or (s.pair.target.path.stem if s.pair else "none")

    async def models(self, request: Request) -> Response:
        denied = self.denied(request)
        if denied:
            return denied
        return JSONResponse({"object": "list", "data": self._models()})

    def _models(self) -> list[dict]:
        """The loaded pair first (``"loaded": true``), then every other installed pair (loaded on request)."""
        info = self.state.describe_pair()
        others = [entry(p) for p in installed_pairs() if p.id != self.state.pair_id or not info["loaded"]]
        if not info["loaded"]:
            return others
        draft = info.get("draft")
        return [{"id": self.model_id(), "object": "model", "created": 0, "owned_by": "tandem",
                 "target": info["target"]["file"], "draft": draft["file"] if draft else None, "loaded": True,
                 "n_ctx": info["n_ctx"], **({"standin": info["standin"]} if info.get("standin") else {})}, *others]

    async def scrape(self, request: Request) -> Response:
        denied = self.denied(request)
        return denied or Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, "text")

    async def infill(self, request: Request) -> Response:
        """llama.cpp's ``/infill`` (``infill.py``)."""
        return await infill.handle(self, request)

    def limiter(self) -> anyio.CapacityLimiter:
        """The threads of queued requests, apart from Gradio's."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(256)
        return self._limiter

    async def _complete(self, request: Request, kind: str) -> Response:
        endpoint = "chat.completions" if kind == "chat" else "completions"
        t0 = time.perf_counter()
        status, run, streaming = 200, None, False

        def record() -> None:
            self.metrics.request(endpoint, status, time.perf_counter() - t0, run.prompt_tokens if run else 0)

        try:
            denied = self.denied(request)
            if denied:
                status = denied.status_code
                return denied
            raw = await self.guard.body(request)
            ticket = await self.choice.enter(self.choice.resolve(requested(raw), self.model_id()), request,
                                             self.guard.drain.refusal)
            if ticket is None:
                status = 499  # the client closed the connection while its pair was loading (nginx's code)
                return Response(status_code=499)
            try:  # the named pair is loaded and stays so until this request holds the generation lock
                run, req = self.prepare(raw, kind)
                self.guard.drain.track(run.stop)
                began = await run.begin(request)
            finally:
                self.choice.leave(ticket)
            if not began:
                status = 499  # the client closed the connection while waiting (nginx's code)
                return Response(status_code=499)
            closing = self.guard.drain.refusal()  # shut down while this request waited its turn
            if closing is not None and not run.text:
                raise closing
            env = F.Envelope(kind, self.model_id())
            headers = _ignored_header(req)
            if req.stream:
                include_usage = bool(req.stream_options and req.stream_options.include_usage)
                streaming = True
                return RunStream(run, _events(run, env, include_usage), on_end=record, headers=headers)
            if not await run.drain(request):
                status = 499
                return Response(status_code=499)
            reply = run.parsed()
            content = reply.content if reply.content or not reply.tool_calls else None
            return JSONResponse(env.response(content, run.finish_reason(), logprobs=run.logprobs(kind, final=True),
                                             tool_calls=reply.tool_calls, **run.extras()), headers=headers)
        except Exception as exc:  # a refusal, a limit found before any work, or a fault: one JSON error
            err = schema.request_error(exc)
            status = err.status
            return _error(err)
        finally:
            if run is not None and not streaming:
                run.close()
            if not streaming:
                record()

    def prepare(self, raw: bytes, kind: str):
        """The Run of an OpenAI request body (also what the Ollama routes translate theirs into)."""
        model = schema.ChatRequest if kind == "chat" else schema.CompletionRequest
        req = schema.parse(model, raw)
        resolved = schema.settings_of(req, S.defaults(self.state.defaults))
        if self.state.pair is None:
            raise schema.RequestError(self.state.load_error or "no pair is loaded yet", code="model_not_loaded",
                                      status=503, type_="server_error")
        style, logprobs = None, None
        if kind == "chat":
            chat = cast(schema.ChatRequest, req)
            messages = schema.chat_messages(chat, resolved)
            limits.check_chat_size(messages)  # before the lock: an oversized chat costs milliseconds
            plan = T.chat_plan(chat, messages, self.state.pair.target.chat_template())
            grammar, style, param = plan.grammar, plan.style, T.grammar_param(chat, plan)
            if chat.logprobs:
                logprobs = chat.top_logprobs or 0
            prompt = lambda pair, cancel: pair.chat_prompt(plan.messages, cancel=cancel,  # noqa: E731 - as /chat
                                                           tools=plan.tools)
        else:
            completion = cast(schema.CompletionRequest, req)
            text = schema.completion_text(completion)
            limits.check_prompt_size(text)
            grammar, param = T.output_grammar(req), T.grammar_param(req)
            logprobs = completion.logprobs
            suffix = completion.suffix
            if suffix is not None and (suffix or not self.state.pair.target.fim_tokens().missing()):
                infill.require_fim(self.state)  # fill in the middle, the request's prompt as the prefix
                rules = Rules(stops=schema.stops(req), suffix=SuffixStop.of(text, suffix)
                              if completion.stop_at_suffix is not False else None)
                fim = lambda pair, cancel: infill.fim_prompt(pair.target, text, suffix, cancel=cancel)  # noqa: E731
                return infill.InfillRun(self.state, fim, resolved, rules, self.limiter(), grammar=grammar,
                                        logprobs=logprobs, grammar_param=param), req
            prompt = lambda pair, cancel: pair.completion_prompt(text, cancel=cancel)  # noqa: E731
        run = Run(self.state, prompt, resolved, schema.stops(req), self.limiter(), grammar=grammar,
                  logprobs=logprobs, tool_style=style, grammar_param=param)
        run.cfg.validate()  # with its grammar (ignore_eos cannot join one): a 400 before the queue
        return run, req


def _ignored_header(req: schema._Common) -> dict:
    names = schema.ignored(req)
    return {IGNORED_HEADER: ", ".join(names)[:2000]} if names else {}


def not_found(request: Request) -> JSONResponse:
    """OpenAI's error body for a path that is not a route (404) or a route asked with another method (405)."""
    path = request.url.path.rstrip("/") or "/"
    allowed = next((methods for route, methods in ROUTES.items() if path.endswith(route)), None)
    if allowed is not None and path.startswith("/v1/models/"):
        allowed = None
    if allowed is None:
        return _error(schema.RequestError(f"no route {request.method} {request.url.path}", code="not_found",
                                          status=404))
    resp = _error(schema.RequestError(f"{request.method} is not allowed on {request.url.path}; use "
                                      f"{' or '.join(allowed)}", code="method_not_allowed", status=405))
    resp.headers["Allow"] = ", ".join(allowed)
    return resp


def openai_errors(app: FastAPI) -> None:
    """On the API's own server: every unknown route or method answers in OpenAI's error format."""
    from starlette.exceptions import HTTPException

    async def handler(request: Request, exc: HTTPException) -> Response:
        if exc.status_code in (404, 405):
            return not_found(request)
        return _error(schema.RequestError(str(exc.detail), status=exc.status_code))

    app.add_exception_handler(HTTPException, handler)  # type: ignore[arg-type]


def mount(app: FastAPI, state: AppState, api_key: Optional[str] = None,
          guard: Optional[Guard] = None) -> OpenAIApi:
    """Add the endpoints to a running (or not yet running) FastAPI app, e.g. Gradio's ``demo.app``."""
    api = OpenAIApi(state, api_key, guard=guard)
    app.include_router(api.router())
    return api
