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
import threading
import time
from typing import AsyncIterator, Callable, Optional, cast

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.engine.summary import Summary
from app.errors import TandemError, api_error, ui_message
from app.engine import limits
from app.server import openai_format as F, openai_schema as schema
from app.server.guard import Guard
from app.service import settings as S
from app.service.metrics import CONTENT_TYPE, Metrics
from app.service.runner import Job, Live, RunStatus, stream
from app.service.state import AppState

INTERVAL = 0.05  # seconds between snapshots of a running generation (the granularity of streamed chunks)


class Run:
    """One request's generation, pulled snapshot by snapshot from the runner in a worker thread."""

    def __init__(self, state: AppState, prompt: Callable, resolved: dict, stops: list[str],
                 limiter: Optional[anyio.CapacityLimiter] = None):
        self.limiter = limiter
        self.stop = threading.Event()
        self.cfg = S.to_config(resolved)
        self.stops = stops
        self.cut = F.Cut(stops)
        self.prompt_tokens = 0
        self.live: Optional[Live] = None
        self.ttft: Optional[float] = None
        self.draft_model = state.pair.draft.path.name if state.pair and state.pair.draft else None

        def build(pair):
            ids = prompt(pair, self.stop)  # the stop switch also abandons a long tokenisation
            self.prompt_tokens = len(ids)
            return ids

        self._gen = stream(state, build, [Job(self.cfg)], self.stop, interval=INTERVAL)
        self._over = False

    async def pull(self) -> bool:
        """Take the next snapshot; False once the generation is over. Raises the engine's error, if any."""
        if self._over:
            return False
        item = await anyio.to_thread.run_sync(next, self._gen, None, limiter=self.limiter)
        if item is None:
            self._over = True
            return False
        status, lives = item
        self.live = live = lives[0]
        if live.tokens and self.ttft is None and live.started is not None:
            self.ttft = time.perf_counter() - live.started
        if live.error:
            self.close()
            raise _engine_error(live)
        if status == RunStatus.DONE:
            self._over = True
        return True

    async def begin(self, request: Request) -> bool:
        """Wait for the turn and the first token (or the end, or an error); False if the client went away."""
        while await self.pull():
            if self.live is not None and (self.live.tokens or self.live.done):
                return True
            if await request.is_disconnected():
                self.close()
                return False
        return True

    def piece(self) -> str:
        """Newly releasable text (held back while it could still become a stop string)."""
        text = self.live.text if self.live else ""
        out = self.cut.advance(text, final=self._over)
        if self.cut.end is not None:
            self.stop.set()  # a stop string: the engine ends at the next step boundary
        return out

    def close(self) -> None:
        """Stop the generation (if still running) and close the snapshot stream; idempotent."""
        self.stop.set()
        try:
            self._gen.close()
        except ValueError:  # pragma: no cover - being advanced in a worker thread; stop is set anyway
            pass
        self._over = True

    @property
    def text(self) -> str:
        text = self.live.text if self.live else ""
        return text[:self.cut.end] if self.cut.end is not None else text

    @property
    def completion_tokens(self) -> int:
        pieces = [t.text for t in (self.live.tokens if self.live else []) if t.token >= 0]
        if self.cut.end is None:
            return len(pieces)
        full = self.live.text
        matched = min((s for s in self.stops if full.startswith(s, self.cut.end)), key=len, default="")
        return F.tokens_through(pieces, self.cut.end + len(matched))

    @property
    def reason(self) -> str:
        if self.cut.end is not None:
            return "stop_string"
        return self.live.done.reason if self.live and self.live.done else "stopped"

    def extras(self) -> dict:
        """usage, stats (LM Studio) and timings (llama.cpp) of the finished generation."""
        live = self.live
        summary = live.summary() if live else Summary()
        n = self.completion_tokens
        prompt_s = (live.decode_start - live.started) if live and live.decode_start and live.started else 0.0
        return {
            "usage": F.usage(self.prompt_tokens, n),
            "stats": F.lmstudio_stats(summary, speculative=self.cfg.speculative, draft_model=self.draft_model,
                                      completion_tokens=n, ttft=self.ttft, reason=self.reason),
            "timings": F.llamacpp_timings(summary, prompt_tokens=self.prompt_tokens, prompt_s=max(prompt_s, 0.0),
                                          completion_tokens=n),
        }


def _engine_error(live: Live) -> schema.RequestError:
    status, type_, code = api_error(live.exception)
    return schema.RequestError(live.error or "generation failed", code=code, status=status, type_=type_)


def _error(exc: schema.RequestError) -> JSONResponse:
    return JSONResponse(F.error_body(str(exc), exc.type, exc.param, exc.code), status_code=exc.status)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class _Stream(StreamingResponse):
    """An SSE response that stops its generation however the response ends (done, error, client gone)."""

    def __init__(self, run: Run, content: AsyncIterator[str], on_end: Callable[[], None]):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.run, self.on_end = run, on_end

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.run.close()
            self.on_end()


async def _events(run: Run, env: F.Envelope, include_usage: bool) -> AsyncIterator[str]:
    yield _sse(env.chunk(run.piece(), first=True))
    try:
        while await run.pull():
            piece = run.piece()
            if piece:
                yield _sse(env.chunk(piece))
        piece = run.piece()
        if piece:
            yield _sse(env.chunk(piece))
        extras = run.extras()
        usage = extras.pop("usage")
        yield _sse(env.chunk(None, F.FINISH.get(run.reason, "stop"), **extras))
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

    def router(self) -> APIRouter:
        r = APIRouter()
        r.add_api_route("/v1/models", self.models, methods=["GET"], include_in_schema=False)
        r.add_api_route("/v1/chat/completions", self.chat, methods=["POST"], include_in_schema=False)
        r.add_api_route("/v1/completions", self.completions, methods=["POST"], include_in_schema=False)
        r.add_api_route("/metrics", self.scrape, methods=["GET"], include_in_schema=False)
        return r

    def _denied(self, request: Request) -> Optional[JSONResponse]:
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
        denied = self._denied(request)
        if denied:
            return denied
        info = self.state.describe_pair()
        data = []
        if info["loaded"]:
            draft = info.get("draft")
            data.append({"id": self.model_id(), "object": "model", "created": 0, "owned_by": "tandem",
                         "target": info["target"]["file"], "draft": draft["file"] if draft else None,
                         "n_ctx": info["n_ctx"]})
        return JSONResponse({"object": "list", "data": data})

    async def scrape(self, request: Request) -> Response:
        denied = self._denied(request)
        return denied or Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, "text")

    async def _complete(self, request: Request, kind: str) -> Response:
        endpoint = "chat.completions" if kind == "chat" else "completions"
        t0 = time.perf_counter()
        status, run, streaming = 200, None, False

        def record() -> None:
            self.metrics.request(endpoint, status, time.perf_counter() - t0, run.prompt_tokens if run else 0)

        try:
            denied = self._denied(request)
            if denied:
                status = denied.status_code
                return denied
            run, req = self._prepare(await self.guard.body(request), kind)
            self.guard.drain.track(run.stop)
            if not await run.begin(request):
                status = 499  # the client closed the connection while waiting (nginx's code)
                return Response(status_code=499)
            closing = self.guard.drain.refusal()  # shut down while this request waited its turn
            if closing is not None and not run.text:
                raise closing
            env = F.Envelope(kind, self.model_id())
            if req.stream:
                include_usage = bool(req.stream_options and req.stream_options.include_usage)
                streaming = True
                return _Stream(run, _events(run, env, include_usage), on_end=record)
            while await run.pull():
                run.piece()
                if await request.is_disconnected():
                    run.close()
                    status = 499
                    return Response(status_code=499)
            run.piece()
            return JSONResponse(env.response(run.text, F.FINISH.get(run.reason, "stop"), **run.extras()))
        except schema.RequestError as exc:
            status = exc.status
            return _error(exc)
        except TandemError as exc:  # a limit or refusal found before any work
            status, type_, code = api_error(exc)
            return _error(schema.RequestError(str(exc), code=code, status=status, type_=type_, param=exc.param))
        except Exception as exc:  # never a traceback for the client; the server keeps running
            status = 500
            return _error(schema.RequestError(ui_message(exc), code="internal_error", status=500,
                                              type_="server_error"))
        finally:
            if run is not None and not streaming:
                run.close()
            if not streaming:
                record()

    def _prepare(self, raw: bytes, kind: str):
        model = schema.ChatRequest if kind == "chat" else schema.CompletionRequest
        req = schema.parse(model, raw)
        resolved = schema.settings_of(req, S.defaults(self.state.defaults))
        if self.state.pair is None:
            raise schema.RequestError(self.state.load_error or "no pair is loaded yet", code="model_not_loaded",
                                      status=503, type_="server_error")
        if kind == "chat":
            messages = schema.chat_messages(cast(schema.ChatRequest, req), resolved)
            limits.check_chat_size(messages)  # before the lock: an oversized chat costs milliseconds
            prompt = lambda pair, cancel: pair.chat_prompt(messages, cancel=cancel)  # noqa: E731 - as /chat
        else:
            text = schema.completion_text(cast(schema.CompletionRequest, req))
            limits.check_prompt_size(text)
            prompt = lambda pair, cancel: pair.completion_prompt(text, cancel=cancel)  # noqa: E731
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(256)
        return Run(self.state, prompt, resolved, schema.stops(req), self._limiter), req


def mount(app: FastAPI, state: AppState, api_key: Optional[str] = None,
          guard: Optional[Guard] = None) -> OpenAIApi:
    """Add the endpoints to a running (or not yet running) FastAPI app, e.g. Gradio's ``demo.app``."""
    api = OpenAIApi(state, api_key, guard=guard)
    app.include_router(api.router())
    return api
