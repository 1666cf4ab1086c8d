"""``POST /infill``: llama.cpp's fill-in-the-middle endpoint (what llama.vim and llama.vscode call), with its
request and its non-OpenAI response: one JSON object, or SSE ``data: {...}`` chunks (``content`` and
``stop: false``, then a final chunk with ``stop: true``, ``stop_type``, ``timings`` …; no ``[DONE]``).

The prompt is laid out as llama.cpp's ``format_prompt_infill`` lays it out (``fim.infill_tokens``) and runs through
the same runner as ``/v1/completions``: the generation lock, the stop switch when the client goes away, the
statistics, the KV cache kept from the previous request (``timings.cache_n``). The completion ends by llama.cpp's
rules (``engine/decoding/infillcut.py``). ``n_predict: 0`` (llama.vim's warm-up of its ring-buffer chunks) only
reads the prompt into the cache and answers at once. ``/v1/completions`` with a ``suffix`` builds the same prompt
(:func:`fim_prompt`).
"""

from __future__ import annotations

import json
import time
from typing import AsyncIterator, Callable, Optional, Protocol, Sequence

import anyio

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.engine.decoding.fim import Chunk, infill_tokens
from app.engine.decoding.infillcut import InfillCut, Rules, StopType, SuffixStop
from app.engine.events import StopReason
from app.engine.llama.backend import ContextFullError, Model
from app.engine.llama.chunking import Cancel
from app.engine.llama.vocab import detokenize
from app.engine import limits
from app.server import infill_schema as IS, openai_format as F, openai_schema as schema
from app.server.guard import Guard
from app.server.openai_run import Run, RunStream
from app.service import settings as S
from app.service.metrics import Metrics
from app.service.state import AppState


class Api(Protocol):
    """What the route needs of the API object (``openai_api.OpenAIApi``)."""

    state: AppState
    guard: Guard
    metrics: Metrics

    def denied(self, request: Request) -> Optional[JSONResponse]: ...

    def limiter(self) -> anyio.CapacityLimiter: ...

    def model_id(self) -> str: ...

FIM_BATCH = 2048  # llama.cpp's default n_batch: prefix and suffix share it 3:1 (at most half the context here)
FIM_PREDICT = 256  # the room for a reply the extra chunks leave (twice this), the same for every request so that
# a warm-up and the request after it lay out the same prompt (llama.cpp uses its server's n_predict, often -1,
# which can fill the whole context)


def require_fim(state: AppState) -> None:
    """FimUnsupported (501, llama.cpp's refusal) when the loaded target has no FIM tokens."""
    pair = state.pair
    if pair is not None:
        pair.target.fim_tokens().require(state.pair_id or pair.target.path.name)


def fim_prompt(target: Model, prefix: str, suffix: str, extra: Sequence[Chunk] = (), prompt: str = "",
               cancel: Cancel = None) -> list[int]:
    """Token ids of an infill prompt in llama.cpp's layout: the editor's text stays text; ``prompt`` (text to
    follow the prefix) is parsed for control tokens, as llama.cpp parses it."""
    limits.check_prompt_size(prefix + suffix + prompt + "".join(c.text for c in extra))
    fim = target.fim_tokens()
    fim.require(target.path.name)

    def tokenize(text: str) -> list[int]:
        return target.tokenize(text, add_special=False, parse_special=False, cancel=cancel)

    ids = infill_tokens(tokenize, fim, prefix, suffix, extra,
                        target.tokenize(prompt, add_special=False, parse_special=True, cancel=cancel) if prompt else [],
                        n_batch=min(FIM_BATCH, target.n_ctx // 2), n_predict=FIM_PREDICT, n_ctx=target.n_ctx,
                        bos=target.bos if target.add_bos and target.bos >= 0 else None)
    if len(ids) >= target.n_ctx:
        raise ContextFullError.prompt(len(ids), target.n_ctx)
    return ids


class InfillRun(Run):
    """A Run whose completion ends by llama.cpp's infill rules (and the suffix rule) instead of stop strings
    alone; also serves ``/v1/completions`` with a suffix."""

    def __init__(self, state: AppState, prompt: Callable, resolved: dict, rules: Rules, limiter=None, **kw):
        super().__init__(state, prompt, resolved, list(rules.stops), limiter, **kw)
        self.rules = InfillCut(rules)
        self.fed = 0  # tokens the rules have read
        self.released = 0  # characters of the completion handed out
        self.finished = False
        self.ids_sent = 0  # token ids already streamed

    def piece(self) -> str:
        live, cut = self.live, self.rules
        if live is not None:
            start = live.decode_start
            while self.fed < len(live.tokens) and not cut.ended:
                ms = (live.times[self.fed] - start) * 1000.0 if start is not None else None
                cut.feed(live.tokens[self.fed].text, ms)
                self.fed += 1
        if cut.ended:
            self.stop.set()  # the engine ends at its next step; what it makes meanwhile is not read
        if self._over and not self.finished:
            self.finished = True
            cut.finish(eog=bool(live and live.done and live.done.reason == StopReason.EOG))
        text = cut.releasable(final=self._over)
        out = text[self.released:]
        self.released = max(self.released, len(text))
        return out

    def new_ids(self) -> list[int]:
        """Token ids read since the last call (a streamed chunk's ``tokens``)."""
        ids = [t.token for t in (self.live.tokens[self.ids_sent:self.fed] if self.live else [])]
        self.ids_sent = self.fed
        return ids

    @property
    def text(self) -> str:
        return self.rules.text

    @property
    def completion_tokens(self) -> int:
        return self.rules.tokens

    @property
    def reason(self) -> str:
        if self.rules.ended:
            return "stop_string" if self.rules.stop == StopType.WORD else StopReason.MAX_TOKENS
        return super().reason

    def stop_type(self) -> StopType:
        if self.rules.ended or self.rules.stop == StopType.EOS:
            return self.rules.stop
        done = self.live.done if self.live else None
        if self.prefill or (done and done.reason in (StopReason.MAX_TOKENS, StopReason.CONTEXT)):
            return StopType.LIMIT
        return StopType.EOS if done and done.reason == StopReason.EOG else StopType.NONE

    def cached_after(self) -> int:
        """Tokens the target's cache holds after this request (llama.cpp's ``tokens_cached``): the prompt and
        what was generated, less the pending last token."""
        return max(0, self.prompt_tokens + (len(self.live.tokens) if self.live else 0) - 1)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def pick(fields: Optional[list[str]], res: dict) -> dict:
    """llama.cpp's ``response_fields``: only these (``a/b`` reaches into ``a``, under the key ``a/b``)."""
    if not fields:
        return res
    out = {}
    for path in fields:
        cur, ok = res, True
        for key in path.split("/"):
            if isinstance(cur, dict) and key in cur:
                cur = cur[key]
            else:
                ok = False
                break
        if ok:
            out[path] = cur
    return out


class Reply:
    """The response objects of one /infill request (llama.cpp's ``to_json_non_oaicompat``)."""

    def __init__(self, run: InfillRun, req: IS.InfillRequest, resolved: dict, model: str, prompt_text: Callable):
        self.run, self.req, self.resolved, self.model, self.prompt_text = run, req, resolved, model, prompt_text

    def partial(self, content: str, last: bool) -> dict:
        run = self.run
        res = {"index": 0, "content": content, "tokens": run.new_ids(), "stop": False, "id_slot": 0,
               "tokens_predicted": run.completion_tokens, "tokens_evaluated": run.prompt_tokens}
        if last:
            res["timings"] = run.extras()["timings"]
        return res

    def final(self, stream: bool) -> dict:
        run, req = self.run, self.req
        ids = [t.token for t in run.live.tokens[:run.completion_tokens]] if run.live and req.return_tokens else []
        extras = run.extras()
        res = {
            "index": 0, "content": "" if stream else run.text, "tokens": [] if stream else ids, "id_slot": 0,
            "stop": True, "model": self.model, "tokens_predicted": run.completion_tokens,
            "tokens_evaluated": run.prompt_tokens, "generation_settings": self.settings(), "prompt": self.prompt_text(),
            "has_new_line": run.rules.has_new_line,
            "truncated": bool(run.live and run.live.done and run.live.done.reason == StopReason.CONTEXT),
            "stop_type": str(run.stop_type()), "stopping_word": run.rules.stopping_word,
            "tokens_cached": run.cached_after(), "timings": extras["timings"], "stats": extras["stats"],
        }
        return pick(req.response_fields, res)

    def settings(self) -> dict:
        r, req = self.resolved, self.req
        keep = ("temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty", "speculative", "proposer", "k",
                "k_max", "p_min", "rule")
        return {"n_predict": -1 if req.predict == -1 else (0 if self.run.prefill else r["max_tokens"]),
                **{k: r[k] for k in keep if k in r}, "stop": req.stops, "n_indent": req.n_indent,
                "t_max_predict_ms": req.t_max_predict_ms, "stream": req.stream, "return_tokens": req.return_tokens,
                "stop_at_suffix": req.stop_at_suffix}


async def _events(reply: Reply) -> AsyncIterator[str]:
    run = reply.run
    try:
        while True:
            more = await run.pull()
            piece = run.piece()
            if piece or not more:  # llama.cpp's last partial chunk carries the timings, even without text
                yield _sse(reply.partial(piece, last=not more))
            if not more:
                break
        yield _sse(reply.final(stream=True))
    except schema.RequestError as exc:  # the response has started: the error goes in the stream, as llama.cpp's
        yield _sse(F.error_body(str(exc), exc.type, exc.param, exc.code))


def _error(exc: schema.RequestError) -> JSONResponse:
    return JSONResponse(F.error_body(str(exc), exc.type, exc.param, exc.code), status_code=exc.status)


def prepare(api: Api, raw: bytes) -> tuple[InfillRun, Reply]:
    state = api.state
    if state.pair is None:
        raise schema.RequestError(state.load_error or "no pair is loaded yet", code="model_not_loaded", status=503,
                                  type_="server_error")
    require_fim(state)  # before the body, as llama.cpp
    req = IS.parse(raw)
    target = state.pair.target
    resolved = IS.settings_of(req, S.defaults(state.defaults), target.n_ctx)
    rules = Rules(stops=req.stops, n_indent=req.n_indent, t_max_predict_ms=float(req.t_max_predict_ms),
                  suffix=SuffixStop.of(req.input_prefix, req.input_suffix) if req.stop_at_suffix else None)
    extra = req.chunks
    holder: dict = {}

    def prompt(pair, cancel) -> list[int]:
        ids = fim_prompt(pair.target, req.input_prefix, req.input_suffix, extra, req.prompt, cancel)
        holder["ids"], holder["target"] = ids, pair.target
        return ids

    def prompt_text() -> str:
        return detokenize(holder["target"].vocab, holder["ids"]) if "ids" in holder else ""

    run = InfillRun(state, prompt, resolved, rules, api.limiter(), prefill=req.predict == 0)
    return run, Reply(run, req, resolved, api.model_id(), prompt_text)


async def handle(api: Api, request: Request) -> Response:
    """The route: the same guard, key, queue, stop switch and metrics as the OpenAI routes."""
    t0 = time.perf_counter()
    status, run, streaming = 200, None, False

    def record() -> None:
        api.metrics.request("infill", status, time.perf_counter() - t0, run.prompt_tokens if run else 0)

    try:
        denied = api.denied(request)
        if denied:
            status = denied.status_code
            return denied
        run, reply = prepare(api, await api.guard.body(request))
        api.guard.drain.track(run.stop)
        if not await run.begin(request):
            status = 499
            return Response(status_code=499)
        closing = api.guard.drain.refusal()
        if closing is not None and not run.text:
            raise closing
        names = IS.ignored(reply.req)
        headers = {"x-tandem-ignored": ", ".join(names)[:2000]} if names else {}
        if reply.req.stream:
            streaming = True
            return RunStream(run, _events(reply), on_end=record, headers=headers)
        if not await run.drain(request):
            status = 499
            return Response(status_code=499)
        return JSONResponse(reply.final(stream=False), headers=headers)
    except Exception as exc:  # a refusal (no FIM tokens: 501), a limit, or a fault: one JSON error
        err = schema.request_error(exc)
        status = err.status
        return _error(err)
    finally:
        if run is not None and not streaming:
            run.close()
        if not streaming:
            record()
