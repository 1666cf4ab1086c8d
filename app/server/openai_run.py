"""One request's generation for the OpenAI-compatible API: pulled snapshot by snapshot from the service's
runner in a worker thread, with what the reply needs on top of the text — stop strings, usage and statistics,
logprobs, and the tool calls read out of the text (the engine's ``ToolCallParser``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import AsyncIterator, Callable, Optional

import anyio
from fastapi import Request
from fastapi.responses import StreamingResponse

from app.engine.summary import Summary
from app.chat.toolcalls import ToolStyle
from app.chat.toolparse import ContentDelta, ParsedReply, ToolCallDelta, ToolCallParser
from app.engine.decoding.grammar import GrammarError
from app.engine.events import StopReason
from app.engine.names import DraftKind, ProposerName
from app.errors import TandemError, api_error
from app.server import openai_format as F, openai_schema as schema
from app.service import settings as S
from app.service.runner import Job, Live, RunStatus, stream
from app.service.state import AppState

INTERVAL = 0.05  # seconds between snapshots of a running generation (the granularity of streamed chunks)


class Run:
    """One request's generation, pulled snapshot by snapshot from the runner in a worker thread."""

    def __init__(self, state: AppState, prompt: Callable, resolved: dict, stops: list[str],
                 limiter: Optional[anyio.CapacityLimiter] = None, grammar=None, logprobs: Optional[int] = None,
                 tool_style: Optional[ToolStyle] = None, grammar_param: str = "response_format",
                 prefill: bool = False):
        self.limiter = limiter
        self.prefill = prefill  # only read the prompt into the cache (an editor's warm-up)
        self.grammar_param = grammar_param
        self.stop = threading.Event()
        self.cfg = replace(S.to_config(resolved), grammar=grammar, logprobs=logprobs)
        self.stops = stops
        self.cut = F.Cut(stops)
        self.prompt_tokens = 0
        self.live: Optional[Live] = None
        self.ttft: Optional[float] = None
        self.draft_model = state.pair.draft.path.name if state.pair and state.pair.draft else None
        if self.draft_model is not None and state.pair.draft_kind != DraftKind.MODEL:
            self.draft_model = f"{self.draft_model} ({state.pair.draft_kind})"  # a Gemma-4 assistant drafter
        if state.pair is not None and self.cfg.proposer == ProposerName.MTP:
            self.draft_model = f"{state.pair.target.path.name} (MTP head)"
        self.target = state.pair.target if state.pair is not None else None  # for its memory notice
        self.standin = state.target_caption()
        self.notice_before = self.target.memory_notice() if self.target is not None else None
        self.parser = ToolCallParser(tool_style) if tool_style is not None else None
        self.reply: Optional[ParsedReply] = None
        self.lp_sent = 0  # logprobs already streamed
        self.offset = 0  # characters of text already covered by streamed logprobs (completions' text_offset)

        def build(pair):
            ids = prompt(pair, self.stop)  # the stop switch also abandons a long tokenisation
            self.prompt_tokens = len(ids)
            return ids

        self._gen = stream(state, build, [Job(self.cfg, prefill=prefill)], self.stop, interval=INTERVAL)
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
            raise _engine_error(live, self.grammar_param)
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

    async def drain(self, request: Request) -> bool:
        """Pull the generation to its end, releasing text as it goes (a whole, unstreamed response); False, the
        generation stopped, if the client went away meanwhile."""
        while await self.pull():
            self.piece()
            if await request.is_disconnected():
                self.close()
                return False
        self.piece()
        return True

    def piece(self) -> str:
        """Newly releasable text (held back while it could still become a stop string)."""
        text = self.live.text if self.live else ""
        out = self.cut.advance(text, final=self._over)
        if self.cut.end is not None:
            self.stop.set()  # a stop string: the engine ends at the next step boundary
        return out

    def deltas(self, piece: str) -> list[dict]:
        """A chat's stream deltas for a newly released piece: content, or tool calls once read."""
        if self.parser is None:
            return [{"content": piece}] if piece else []
        found = self.parser.feed(piece) if piece else []
        if self._over:
            rest, self.reply = self.parser.finish()
            found += rest
        out: list[dict] = []
        for d in found:
            if isinstance(d, ContentDelta) and d.text:
                out.append({"content": d.text})
            elif isinstance(d, ToolCallDelta):
                out += F.call_deltas(d.index, d.call)
        return out

    def parsed(self) -> ParsedReply:
        """The whole reply read for tool calls (after the generation; plain text without tools)."""
        if self.parser is None:
            return ParsedReply(self.text)
        if self.reply is None:
            self.parser = ToolCallParser(self.parser.style)  # read the final text from the start
            self.parser.feed(self.text)
            _, self.reply = self.parser.finish()
        return self.reply

    def logprobs(self, kind: str, final: bool = False) -> Optional[dict]:
        """logprobs of the tokens not yet sent (all of them for a whole response), in the endpoint's format."""
        if self.cfg.logprobs is None or self.live is None:
            return None
        n = self.completion_tokens if (final or self._over) else len(self._emitted())
        got = [t.logprob for t in self._emitted()[self.lp_sent:n] if t.logprob is not None]
        if not got and not final:
            return None
        self.lp_sent = max(self.lp_sent, n)
        if kind == "chat":
            return F.chat_logprobs(got, self.live.pieces)
        out = F.completion_logprobs(got, self.live.pieces, self.offset)
        self.offset += sum(len(t) for t in out["tokens"])
        return out

    def _emitted(self) -> list:
        return [t for t in (self.live.tokens if self.live else []) if t.token >= 0]

    def close(self) -> None:
        """Stop the generation (if still running) and close the snapshot stream; idempotent."""
        self.stop.set()
        try:
            self._gen.close()
        except ValueError:  # pragma: no cover - being advanced in a worker thread; stop is set anyway
            pass
        self._over = True

    @property
    def over(self) -> bool:
        return self._over

    @property
    def text(self) -> str:
        text = self.live.text if self.live else ""
        return text[:self.cut.end] if self.cut.end is not None else text

    @property
    def completion_tokens(self) -> int:
        pieces = [t.text for t in self._emitted()]
        if self.cut.end is None:
            return len(pieces)
        full = self.live.text if self.live else ""
        matched = min((s for s in self.stops if full.startswith(s, self.cut.end)), key=len, default="")
        return F.tokens_through(pieces, self.cut.end + len(matched))

    @property
    def reason(self) -> str:
        if self.cut.end is not None:
            return "stop_string"
        return self.live.done.reason if self.live and self.live.done else StopReason.STOPPED

    def finish_reason(self) -> str:
        if self.reply is not None and self.reply.finish_reason:
            return self.reply.finish_reason
        return F.FINISH.get(self.reason, "stop")

    def extras(self) -> dict:
        """usage, stats (LM Studio) and timings (llama.cpp) of the finished generation."""
        live = self.live
        summary = live.summary() if live else Summary()
        n = self.completion_tokens
        prompt_end = (live.decode_start or (live.last if self.prefill else None)) if live else None
        prompt_s = (prompt_end - live.started) if live and prompt_end and live.started else 0.0
        stats = F.lmstudio_stats(summary, speculative=self.cfg.speculative, draft_model=self.draft_model,
                                 completion_tokens=n, ttft=self.ttft, reason=self.reason)
        notice = self.target.memory_notice() if self.target is not None else None
        if notice and notice != self.notice_before:  # hybrid memory: why it was decoded again (said once)
            stats["memory_notice"] = notice
        if self.standin:
            stats["standin"] = self.standin
        return {
            "usage": F.usage(self.prompt_tokens, n, cached=(live.cached or 0) if live else 0),
            "stats": stats,
            "timings": F.llamacpp_timings(summary, prompt_tokens=self.prompt_tokens, prompt_s=max(prompt_s, 0.0),
                                          completion_tokens=n, cached=(live.cached or 0) if live else 0,
                                          restored=live.restored if live else 0),
        }


def _engine_error(live: Live, grammar_param: str) -> schema.RequestError:
    status, type_, code = api_error(live.exception)
    exc = live.exception
    param = grammar_param if isinstance(exc, GrammarError) else exc.param if isinstance(exc, TandemError) else None
    return schema.RequestError(live.error or "generation failed", code=code, status=status, type_=type_,
                               param=param)


class RunStream(StreamingResponse):
    """A streamed response (SSE by default; Ollama's NDJSON) that stops its generation however the response ends
    (done, error, client gone)."""

    def __init__(self, run: Run, content: AsyncIterator[str], on_end: Callable[[], None], headers: dict,
                 media_type: str = "text/event-stream"):
        super().__init__(content, media_type=media_type,
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})
        self.run, self.on_end = run, on_end

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.run.close()
            self.on_end()
