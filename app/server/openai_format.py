"""Pure functions behind the OpenAI-compatible API: stop strings, usage, and the speculative statistics in the
two conventions clients already read (LM Studio's ``stats`` and llama.cpp's ``timings``), and the response
and chunk objects themselves.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Optional, Sequence

from app.engine.decoding.logprobs import TokenLogprob
from app.engine.decoding.stops import find_stop, held_back
from app.engine.events import StopReason
from app.engine.summary import Summary
from app.chat.toolcalls import ToolCall

# the engine's DoneEvent.reason (or "stop_string": the server cut the reply at a stop string) → OpenAI's
# finish_reason / LM Studio's stop_reason
FINISH = {StopReason.EOG: "stop", "stop_string": "stop", StopReason.MAX_TOKENS: "length", StopReason.CONTEXT: "length",
          StopReason.STOPPED: "stop"}
STOP_REASON = {StopReason.EOG: "eosFound", "stop_string": "stopStringFound",
               StopReason.MAX_TOKENS: "maxPredictedTokensReached", StopReason.CONTEXT: "contextLengthReached",
               StopReason.STOPPED: "userStopped"}


# --- stop strings --------------------------------------------------------------------------------------------

def tokens_through(pieces: Sequence[str], end: int) -> int:
    """How many tokens (by their text ``pieces``) it takes to produce the first ``end`` characters."""
    if end <= 0:
        return 0
    length = 0
    for i, piece in enumerate(pieces):
        length += len(piece)
        if length >= end:
            return i + 1
    return len(pieces)


@dataclass
class Cut:
    """The text to send so far: released[:sent] is out; ``end`` is set once a stop string is found."""

    stops: Sequence[str]
    sent: int = 0
    end: Optional[int] = None

    def advance(self, text: str, final: bool) -> str:
        """The next piece of ``text`` that is safe to send (all the rest when ``final``)."""
        if self.end is None and self.stops:
            self.end = find_stop(text, self.stops, max(0, self.sent - max(map(len, self.stops))))
        if self.end is not None:
            upto = self.end
        elif final or not self.stops:
            upto = len(text)
        else:
            upto = len(text) - held_back(text, self.stops)
        piece = text[self.sent:upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return piece


# --- statistics ---------------------------------------------------------------------------------------------

def usage(prompt_tokens: int, completion_tokens: int, cached: int = 0) -> dict:
    """OpenAI's usage; ``cached``: prompt tokens the KV cache already held (``prompt_tokens_details``, as OpenAI
    and llama.cpp's server report the prompt cache)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached}}


def lmstudio_stats(summary: Summary, *, speculative: bool, draft_model: Optional[str], completion_tokens: int,
                   ttft: Optional[float], reason: str) -> dict:
    """LM Studio's response ``stats`` (snake_case as in its REST API), plus Tandem's own rates."""
    drafted, accepted = int(summary.drafted), int(summary.accepted)
    out = {
        "tokens_per_second": summary.tokens_per_s,
        "time_to_first_token": ttft,
        "generation_time": summary.t_total,
        "stop_reason": STOP_REASON.get(reason, reason),
        "completion_tokens": completion_tokens,
        "speculative": speculative,
    }
    if speculative:
        out.update(
            draft_model=draft_model,
            total_draft_tokens_count=drafted,
            accepted_draft_tokens_count=accepted,
            rejected_draft_tokens_count=drafted - accepted,
            ignored_draft_tokens_count=0,
            acceptance_rate=summary.acceptance_rate,
            tokens_per_target_pass=summary.mean_accepted,
            target_passes=int(summary.steps),
            emitted_tokens=int(summary.tokens),
            per_position_acceptance=list(summary.per_position),
            # auto K's pauses: target passes that drafted nothing because drafting would not have paid, and why
            paused_target_passes=int(summary.paused_steps),
            paused_reason=summary.limit,
            lookup_draft_tokens_count=int(summary.lookup_drafted),  # by drafter: prompt lookup …
            lookup_accepted_tokens_count=int(summary.lookup_accepted),
            # of those, copied from an earlier request's text (lookup_memory "pair"): a repeat of earlier work
            lookup_earlier_tokens_count=int(summary.lookup_earlier),
            model_draft_tokens_count=int(summary.model_drafted),  # … and the draft model
            model_accepted_tokens_count=int(summary.model_accepted),
            # tree drafts (proposer "tree"): passes that verified branches beside the chain, their branch tokens
            # (of total_draft_tokens_count), the draft tokens such a pass kept on average, passes that kept a branch
            tree_target_passes=int(summary.tree_steps),
            tree_branch_tokens_count=int(summary.tree_tokens),
            tree_accepted_path_length=summary.mean_path,
            tree_branch_hits=int(summary.branch_hits),
        )
    return out


def llamacpp_timings(summary: Summary, *, prompt_tokens: int, prompt_s: float, completion_tokens: int,
                     cached: int = 0, restored: int = 0) -> dict:
    """llama.cpp server's ``timings`` (milliseconds; draft counters as in its speculative responses).

    As llama.cpp's: ``prompt_n`` counts the prompt tokens actually processed, ``cache_n`` those the KV cache
    already held (a repeated prompt is not "processed" at a hundred thousand tokens a second); Tandem's
    ``cache_restored_n``: of ``cache_n``, those a saved prompt state put back (the prompt cache)."""
    decode_s = summary.t_total
    prompt_tokens -= cached
    return {
        "cache_n": cached,
        "cache_restored_n": restored,
        "prompt_n": prompt_tokens,
        "prompt_ms": prompt_s * 1000.0,
        "prompt_per_token_ms": prompt_s * 1000.0 / prompt_tokens if prompt_tokens else 0.0,
        "prompt_per_second": prompt_tokens / prompt_s if prompt_s > 0 else 0.0,
        "predicted_n": completion_tokens,
        "predicted_ms": decode_s * 1000.0,
        "predicted_per_token_ms": decode_s * 1000.0 / completion_tokens if completion_tokens else 0.0,
        "predicted_per_second": summary.tokens_per_s,
        "draft_n": int(summary.drafted),
        "draft_n_accepted": int(summary.accepted),
        "draft_lookup_n": int(summary.lookup_drafted),  # of draft_n: proposed by prompt lookup
        "draft_lookup_n_accepted": int(summary.lookup_accepted),
        "draft_lookup_n_earlier": int(summary.lookup_earlier),  # of those: copied from an earlier request's text
        "draft_tree_n": int(summary.tree_tokens),  # of draft_n: tree branches beside the chain (proposer "tree")
        "draft_tree_passes": int(summary.tree_steps),
        "draft_tree_branch_hits": int(summary.branch_hits),  # tree passes whose kept path went through a branch
    }


# --- responses ----------------------------------------------------------------------------------------------

class Envelope:
    """id, created and model shared by a response and all of its chunks."""

    def __init__(self, kind: str, model: str):
        self.chat = kind == "chat"
        prefix = "chatcmpl" if self.chat else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model

    def _wrap(self, obj: str, choices: list, **extra) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "tandem", "choices": choices, **extra}

    def response(self, text: Optional[str], finish: str, logprobs: Optional[dict] = None,
                 tool_calls: Sequence[ToolCall] = (), **extra) -> dict:
        if self.chat:
            message: dict = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = [call_json(c) for c in tool_calls]
            choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
            return self._wrap("chat.completion", [choice], **extra)
        choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
        return self._wrap("text_completion", [choice], **extra)

    def chunk(self, text: Optional[str], finish: Optional[str] = None, first: bool = False,
              logprobs: Optional[dict] = None, delta: Optional[dict] = None, **extra) -> dict:
        """A streamed chunk; a chat's first one carries the role alone (as llama.cpp's), ``delta`` overrides."""
        if self.chat:
            if delta is None:
                delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            return self._wrap("chat.completion.chunk", [choice], **extra)
        choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
        return self._wrap("text_completion", [choice], **extra)

    def usage_chunk(self, **extra) -> dict:
        return self._wrap("chat.completion.chunk" if self.chat else "text_completion", [], **extra)


# --- tool calls and logprobs ------------------------------------------------------------------------------

def call_json(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def call_deltas(index: int, call: ToolCall) -> list[dict]:
    """A streamed call as OpenAI streams it: id, type and name first, then the arguments."""
    return [{"tool_calls": [{"index": index, "id": call.id, "type": "function",
                             "function": {"name": call.name, "arguments": ""}}]},
            {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}]


def _text_of(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def chat_logprobs(logprobs: Sequence[TokenLogprob], pieces: dict) -> dict:
    """OpenAI chat's ``logprobs``: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}."""
    def entry(token: int, logprob: float) -> dict:
        piece = pieces.get(token, b"")
        return {"token": _text_of(piece), "logprob": logprob, "bytes": list(piece)}
    return {"content": [dict(entry(lp.token, lp.logprob), top_logprobs=[entry(t.token, t.logprob) for t in lp.top])
                        for lp in logprobs]}


def completion_logprobs(logprobs: Sequence[TokenLogprob], pieces: dict, offset: int = 0) -> dict:
    """The legacy completions ``logprobs``: tokens, token_logprobs, top_logprobs ({token: logprob}), text_offset
    (each token's start in the completion's text, from ``offset``)."""
    tokens, offsets = [], []
    for lp in logprobs:
        offsets.append(offset)
        tokens.append(_text_of(pieces.get(lp.token, b"")))
        offset += len(tokens[-1])
    return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in logprobs],
            "top_logprobs": [{_text_of(pieces.get(t.token, b"")): t.logprob for t in lp.top} for lp in logprobs],
            "text_offset": offsets}


def error_body(message: str, type_: str = "invalid_request_error", param: Optional[str] = None,
               code: Optional[str] = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
