"""Request bodies of the OpenAI-compatible API, validated with pydantic, and what they mean for Tandem.

Wrong types are refused (:class:`RequestError`, HTTP 400, OpenAI's error shape) naming the field; unknown
fields are ignored, as other local servers do, and named in the response header ``x-tandem-ignored``
(:func:`ignored`). Besides OpenAI's own fields, a request may carry the speculative settings of the ``/chat`` endpoint
(``speculative``, ``proposer``, ``k``, ``k_max``, ``p_min``, ``rule``, ``lookup_memory``) and llama.cpp's sampling extras
(``top_k``, ``min_p``, ``repeat_penalty``); whatever is left out takes the app's defaults, as in ``/chat``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.engine.errors import BadInput
from app.errors import TandemError, api_error, ui_message
from app.engine.decoding.logprobs import MAX_TOP
from app.engine.names import Rule
from app.service import chat, settings as S

Number = Union[StrictInt, float]
SETTING_FIELDS = ("temperature", "top_p", "seed", "speculative", "proposer", "k", "k_max", "p_min", "rule",
                  "lookup_memory", "top_k", "min_p", "repeat_penalty")
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


class RequestError(BadInput, ValueError):
    """A bad request: HTTP ``status`` with OpenAI's ``{"error": {message, type, param, code}}``."""

    def __init__(self, message: str, param: Optional[str] = None, code: Optional[str] = None, status: int = 400,
                 type_: str = "invalid_request_error"):
        super().__init__(message, param=param, status=status)
        self.code, self.type = code, type_  # OpenAI's code may be null


def request_error(exc: Exception) -> RequestError:
    """Whatever a route meets, as the error it answers with: a RequestError as it is, a TandemError with its own
    status and code, anything else a 500 in plain words (never a traceback; the server keeps running)."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, TandemError):
        status, type_, code = api_error(exc)
        return RequestError(str(exc), code=code, status=status, type_=type_, param=exc.param)
    return RequestError(ui_message(exc), code="internal_error", status=500, type_="server_error")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # unknown fields: kept aside, named, ignored


class StreamOptions(_Strict):
    include_usage: Optional[StrictBool] = None


class TextPart(_Strict):
    type: Literal["text"]
    text: StrictStr


class FunctionCall(_Strict):
    name: StrictStr
    arguments: StrictStr = "{}"


class ToolCallIn(_Strict):
    id: Optional[StrictStr] = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[StrictStr, list[TextPart], None] = None
    name: Optional[StrictStr] = None
    tool_calls: Optional[list[ToolCallIn]] = None  # an assistant's earlier calls
    tool_call_id: Optional[StrictStr] = None  # a tool result: the call it answers


class TandemSettings(_Strict):
    """Tandem's speculative settings (the /chat names) and llama.cpp's sampling extras, on every generating
    route (the OpenAI ones and /infill)."""

    speculative: Optional[StrictBool] = None
    proposer: Optional[Literal["auto", "draft", "lookup", "mtp", "tree"]] = None
    k: Union[StrictInt, Literal["auto"], None] = None
    k_max: Optional[StrictInt] = None
    p_min: Optional[Number] = None
    rule: Optional[Literal["rejection", "match", "coupled"]] = None
    top_k: Optional[StrictInt] = None
    min_p: Optional[Number] = None
    repeat_penalty: Optional[Number] = None
    lookup_memory: Optional[Literal["conversation", "pair"]] = None


class _Common(TandemSettings):
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
    # structured output: OpenAI's response_format and llama.cpp's grammar / json_schema (structured.py)
    response_format: Optional[dict[str, Any]] = None
    grammar: Optional[StrictStr] = None
    json_schema: Optional[dict[str, Any]] = None
    # benchmarks' length controls: llama.cpp's ignore_eos, vLLM's min_tokens (GenConfig)
    ignore_eos: Optional[StrictBool] = None
    min_tokens: Optional[StrictInt] = None


class ChatRequest(_Common):
    messages: list[Message]
    max_completion_tokens: Optional[StrictInt] = None
    logprobs: Optional[StrictBool] = None
    top_logprobs: Optional[StrictInt] = None
    tools: Optional[list[Any]] = None  # checked by the engine's toolcalls.parse_tools
    tool_choice: Union[StrictStr, dict[str, Any], None] = None
    parallel_tool_calls: Optional[StrictBool] = None


class CompletionRequest(_Common):
    prompt: Union[StrictStr, list[StrictStr]]
    echo: Optional[StrictBool] = None
    logprobs: Optional[StrictInt] = None
    suffix: Optional[StrictStr] = None  # fill in the middle: the prompt is the prefix (infill.py)
    stop_at_suffix: Optional[StrictBool] = None  # Tandem's: end where the model copies the suffix (on unless false)


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
        if req.top_logprobs is not None and not 0 <= req.top_logprobs <= MAX_TOP:
            raise RequestError(f"top_logprobs must be between 0 and {MAX_TOP}", param="top_logprobs",
                               code="invalid_value")
        _check_turns(req.messages)
    if isinstance(req, CompletionRequest):
        if isinstance(req.prompt, list) and len(req.prompt) != 1:
            raise RequestError("prompt must be one string (batches are not supported)", param="prompt",
                               code="unsupported_value")
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_TOP:
            raise RequestError(f"logprobs must be between 0 and {MAX_TOP}", param="logprobs", code="invalid_value")
        if req.echo:
            raise RequestError("echo is not supported", param="echo", code="unsupported_value")
    if len(stops(req)) > 16:
        raise RequestError("at most 16 stop strings", param="stop", code="invalid_value")


def _check_turns(messages: list[Message]) -> None:
    """llama.cpp's rule: two assistant turns in a row are refused (one reply cannot follow another)."""
    for i in range(1, len(messages)):
        if messages[i].role == messages[i - 1].role == "assistant":
            raise RequestError(f"messages[{i}] is a second assistant message in a row; merge the two or put a "
                               "user message between them", param=f"messages[{i}]", code="invalid_value")


def ignored(req: BaseModel, path: str = "") -> list[str]:
    """The names of the fields the request carried that Tandem does not use (nested ones as a.b[0].c)."""
    out = [path + name for name in (req.model_extra or {})]
    for name in type(req).model_fields:
        value = getattr(req, name)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, BaseModel):
                where = f"{path}{name}[{i}]." if isinstance(value, list) else f"{path}{name}."
                out += ignored(item, where)
    return out


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
        resolved = S.resolve(chosen, base)
    except S.SettingsError as exc:
        raise RequestError(str(exc), param=exc.param if exc.param in chosen else None, code="invalid_value") from None
    if req.rule is None and resolved["seed"] is not None and resolved["temperature"] > 0:
        resolved["rule"] = Rule.COUPLED  # a seed holds whatever the speculation (coupled.py)
    resolved.update(ignore_eos=bool(req.ignore_eos), min_tokens=req.min_tokens or 0)
    return resolved


def chat_messages(req: ChatRequest, resolved: dict) -> list[dict]:
    """The conversation as ``/chat`` builds it (same system-prompt rule, same text extraction); tool calls and
    tool results keep their fields for the engine's ``toolcalls.tool_prompt``."""
    history = []
    for m in req.messages:
        msg: dict[str, Any] = {"role": ROLES[m.role], "content": _content(m.content)}
        if m.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                               "arguments": c.function.arguments}}
                                 for c in m.tool_calls]
        if m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        if m.name is not None and m.role == "tool":
            msg["name"] = m.name
        history.append(msg)
    return chat.build_messages(history, None, resolved["system"])


def completion_text(req: CompletionRequest) -> str:
    return req.prompt if isinstance(req.prompt, str) else req.prompt[0]


def _content(content: Union[str, list[TextPart], None]) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)
