"""Request bodies of the OpenAI-compatible API, validated with pydantic, and what they mean for Tandem.

Unknown fields and wrong types are refused (:class:`RequestError`, HTTP 400, OpenAI's error shape) naming the
field. Besides OpenAI's own fields, a request may carry the speculative settings of the ``/chat`` endpoint
(``speculative``, ``proposer``, ``k``, ``k_max``, ``p_min``, ``rule``) and llama.cpp's sampling extras
(``top_k``, ``min_p``, ``repeat_penalty``); whatever is left out takes the app's defaults, as in ``/chat``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.engine.errors import BadInput
from app.service import chat, settings as S

Number = Union[StrictInt, float]
SETTING_FIELDS = ("temperature", "top_p", "seed", "speculative", "proposer", "k", "k_max", "p_min", "rule",
                  "top_k", "min_p", "repeat_penalty")
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class RequestError(BadInput, ValueError):
    """A bad request: HTTP ``status`` with OpenAI's ``{"error": {message, type, param, code}}``."""

    def __init__(self, message: str, param: Optional[str] = None, code: Optional[str] = None, status: int = 400,
                 type_: str = "invalid_request_error"):
        super().__init__(message, param=param, status=status)
        self.code, self.type = code, type_  # OpenAI's code may be null


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: Optional[StrictBool] = None


class TextPart(_Strict):
    type: Literal["text"]
    text: StrictStr


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[StrictStr, list[TextPart], None] = None
    name: Optional[StrictStr] = None


class _Common(_Strict):
    model: Optional[StrictStr] = None
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    seed: Optional[StrictInt] = None
    stop: Union[StrictStr, list[StrictStr], None] = Field(default=None)
    stream: Optional[StrictBool] = None
    stream_options: Optional[StreamOptions] = None
    n: Optional[StrictInt] = None
    user: Optional[StrictStr] = None
    frequency_penalty: Optional[Number] = None
    presence_penalty: Optional[Number] = None
    # Tandem's speculative settings (the /chat names) and llama.cpp's sampling extras
    speculative: Optional[StrictBool] = None
    proposer: Optional[Literal["draft", "lookup"]] = None
    k: Union[StrictInt, Literal["auto"], None] = None
    k_max: Optional[StrictInt] = None
    p_min: Optional[Number] = None
    rule: Optional[Literal["rejection", "match"]] = None
    top_k: Optional[StrictInt] = None
    min_p: Optional[Number] = None
    repeat_penalty: Optional[Number] = None


class ChatRequest(_Common):
    messages: list[Message]
    max_completion_tokens: Optional[StrictInt] = None
    logprobs: Optional[StrictBool] = None


class CompletionRequest(_Common):
    prompt: Union[StrictStr, list[StrictStr]]
    echo: Optional[StrictBool] = None
    logprobs: Optional[StrictInt] = None
    suffix: Optional[StrictStr] = None


def parse(model: type[_Common], raw: bytes) -> _Common:
    """Validate a JSON body; RequestError names the first bad field."""
    if not raw.strip():
        raise RequestError("the request body is empty; send a JSON object")
    try:
        req = model.model_validate_json(raw)
    except ValidationError as exc:
        raise _describe(exc) from None
    _refuse_unsupported(req)
    return req


def _field_path(loc: tuple) -> list[str]:
    """The field names and indices of a pydantic error location, without union member tags ('int', …)."""
    return [str(p) for p in loc if isinstance(p, int) or not _TYPE_TAG.match(str(p))]


_TYPE_TAG = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\]|function-.*)$")


def _describe(exc: ValidationError) -> RequestError:
    errors = exc.errors(include_url=False)
    err = errors[0]
    loc = _field_path(err.get("loc", ()))
    param = ".".join(loc) or None
    kind = err.get("type", "")
    msgs = list(dict.fromkeys(e["msg"] for e in errors if _field_path(e.get("loc", ())) == loc))
    if kind == "json_invalid":
        return RequestError(f"the body is not valid JSON: {err.get('msg')}", code="invalid_json")
    if kind == "extra_forbidden":
        return RequestError(f"unrecognized request argument supplied: {param}", param=param, code="unknown_parameter")
    if kind == "missing":
        return RequestError(f"missing required parameter: {param}", param=param, code="missing_required_parameter")
    if kind == "model_type" and not loc:
        return RequestError("the body must be a JSON object", code="invalid_type")
    return RequestError(f"invalid value for {param}: {'; '.join(msgs)}", param=param, code="invalid_value")


def _refuse_unsupported(req: _Common) -> None:
    if req.n not in (None, 1):
        raise RequestError("only n = 1 is supported", param="n", code="unsupported_value")
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(req, name) not in (None, 0):
            raise RequestError(f"{name} is not supported (use repeat_penalty)", param=name, code="unsupported_value")
    if isinstance(req, ChatRequest):
        if not req.messages:
            raise RequestError("messages must not be empty", param="messages", code="invalid_value")
        if req.logprobs:
            raise RequestError("logprobs are not supported", param="logprobs", code="unsupported_value")
    if isinstance(req, CompletionRequest):
        if isinstance(req.prompt, list) and len(req.prompt) != 1:
            raise RequestError("prompt must be one string (batches are not supported)", param="prompt",
                               code="unsupported_value")
        for name in ("echo", "logprobs", "suffix"):
            if getattr(req, name) not in (None, False, 0):
                raise RequestError(f"{name} is not supported", param=name, code="unsupported_value")
    if len(stops(req)) > 16:
        raise RequestError("at most 16 stop strings", param="stop", code="invalid_value")


def stops(req: _Common) -> list[str]:
    if req.stop is None:
        return []
    return [s for s in ([req.stop] if isinstance(req.stop, str) else req.stop) if s]


def settings_of(req: _Common, base: dict) -> dict:
    """The request's generation settings resolved over the app's defaults (``base``), as ``/chat`` does."""
    chosen: dict[str, Any] = {name: getattr(req, name) for name in SETTING_FIELDS if getattr(req, name) is not None}
    max_tokens = getattr(req, "max_completion_tokens", None) or req.max_tokens
    if max_tokens is not None:
        chosen["max_tokens"] = max_tokens
    try:
        return S.resolve(chosen, base)
    except S.SettingsError as exc:
        raise RequestError(str(exc), param=exc.param if exc.param in chosen else None, code="invalid_value") from None


def chat_messages(req: ChatRequest, resolved: dict) -> list[dict]:
    """The conversation as ``/chat`` builds it (same system-prompt rule, same text extraction)."""
    history = [{"role": ROLES[m.role], "content": _content(m.content)} for m in req.messages]
    return chat.build_messages(history, None, resolved["system"])


def completion_text(req: CompletionRequest) -> str:
    return req.prompt if isinstance(req.prompt, str) else req.prompt[0]


def _content(content: Union[str, list[TextPart], None]) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)
