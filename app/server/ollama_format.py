"""Ollama's API in the shapes its clients send and read (``ollama_api.py`` serves them): request bodies, checked
with pydantic and turned into the OpenAI-compatible requests the rest of the server already runs (one set of
checks, one prompt builder, one tool-call reader), and the objects Ollama answers with — streamed chunks, the
final object with its durations in nanoseconds, and the model facts of ``/api/tags``, ``/api/show`` and
``/api/ps``. Field names follow Ollama's docs/api.md and its Python client (``ollama/_types.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

from app.chat.toolcalls import ToolCall
from app.models import meta
from app.models.ggufheader import GGUFError
from app.server.openai_schema import RequestError

Number = Union[StrictInt, float]
VERSION = "0.9.0"  # the Ollama API this server speaks (structured outputs, tools); clients gate features on it
DONE = {"length": "length"}  # OpenAI's finish_reason → Ollama's done_reason ("stop" for the rest, tool calls too
OPTION_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
                "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
                "frequency_penalty": "frequency_penalty"}  # Ollama's option → the OpenAI request's field


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields: named in x-tandem-ignored, as on /v1


class Options(_Loose):
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    top_k: Optional[StrictInt] = None
    min_p: Optional[Number] = None
    seed: Optional[StrictInt] = None
    num_predict: Optional[StrictInt] = None
    stop: Union[StrictStr, list[StrictStr], None] = None
    repeat_penalty: Optional[Number] = None
    presence_penalty: Optional[Number] = None
    frequency_penalty: Optional[Number] = None


class Function(_Loose):
    name: StrictStr
    arguments: Union[dict[str, Any], StrictStr] = {}


class ToolCallIn(_Loose):
    function: Function


class Message(_Loose):
    role: Literal["system", "user", "assistant", "tool"]
    content: Optional[StrictStr] = None
    images: Optional[list[Any]] = None
    tool_calls: Optional[list[ToolCallIn]] = None
    tool_name: Optional[StrictStr] = None
    thinking: Optional[StrictStr] = None


class _Body(_Loose):
    model: StrictStr = ""
    stream: Optional[StrictBool] = None  # Ollama streams unless told not to
    format: Union[Literal["", "json"], dict[str, Any], None] = None
    options: Optional[Options] = None
    keep_alive: Union[StrictStr, Number, None] = None  # accepted: the pair stays loaded for the app's other users
    think: Union[StrictBool, StrictStr, None] = None


class ChatBody(_Body):
    messages: Optional[list[Message]] = None
    tools: Optional[list[Any]] = None


class GenerateBody(_Body):
    prompt: Optional[StrictStr] = None
    suffix: Optional[StrictStr] = None
    system: Optional[StrictStr] = None
    template: Optional[StrictStr] = None
    context: Optional[list[Any]] = None
    raw: Optional[StrictBool] = None
    images: Optional[list[Any]] = None


class ShowBody(_Loose):
    model: StrictStr = ""
    name: Optional[StrictStr] = None  # the older clients' field
    verbose: Optional[StrictBool] = None


UNUSED = ("keep_alive", "think", "template", "context")  # accepted and named in x-tandem-ignored


def parse(model: type[_Loose], raw: bytes) -> Any:
    """The body as ``model``; RequestError (400, Ollama's ``{"error": ...}``) naming the field that is wrong."""
    try:
        body = model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ()) if not str(p).startswith(("function-", "literal")))
        if err.get("type") == "json_invalid":
            raise RequestError(f"the body is not valid JSON: {err.get('msg')}") from None
        if err.get("type") == "model_type" and not where:
            raise RequestError("the body must be a JSON object") from None
        raise RequestError(f"invalid value for {where or 'the body'}: {err.get('msg')}", param=where) from None
    return body


def ignored(body: _Body) -> list[str]:
    """The fields the request carried that Tandem does not use."""
    names = list(body.model_extra or {}) + [n for n in UNUSED if n in body.model_fields_set]
    extra = body.options.model_extra if body.options is not None else None
    return names + [f"options.{n}" for n in (extra or {})]


def _common(body: _Body, n_ctx: int) -> dict[str, Any]:
    """The OpenAI request fields of Ollama's ``options`` and ``format``."""
    out: dict[str, Any] = {"model": body.model or "x"}
    opts = body.options or Options()
    for name, field in OPTION_NAMES.items():
        value = getattr(opts, name)
        if value is not None:
            out[field] = value
    if opts.stop is not None:
        out["stop"] = opts.stop
    # num_predict: -1 (Ollama's default) and -2 run until the end or a full context, as Ollama does
    out["max_tokens"] = opts.num_predict if opts.num_predict is not None and opts.num_predict > 0 else n_ctx
    if body.format == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(body.format, dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": body.format}}
    return out


def chat_request(body: ChatBody, n_ctx: int) -> dict[str, Any]:
    """The OpenAI chat request for an Ollama chat: earlier tool calls get ids, each tool result the id of the
    first unanswered call of its tool (Ollama's messages carry names, OpenAI's ids)."""
    out = _common(body, n_ctx)
    messages: list[dict] = []
    open_calls: list[tuple[str, str]] = []
    n_calls = 0
    for i, m in enumerate(body.messages or []):
        if m.images:
            raise RequestError(f"messages[{i}].images: the loaded pair reads text only", param=f"messages[{i}].images")
        msg: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.tool_calls:
            msg["tool_calls"] = []
            for c in m.tool_calls:
                call_id, n_calls = f"call_{n_calls}", n_calls + 1
                args = c.function.arguments
                msg["tool_calls"].append({"id": call_id, "type": "function", "function": {
                    "name": c.function.name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
                open_calls.append((call_id, c.function.name))
        if m.role == "tool":
            pick = next((c for c in open_calls if m.tool_name in (None, c[1])), None)
            if pick is not None:
                open_calls.remove(pick)
                msg["tool_call_id"] = pick[0]
            if m.tool_name or pick:
                msg["name"] = m.tool_name or pick[1]
        messages.append(msg)
    out["messages"] = messages
    if body.tools:
        out["tools"] = body.tools
    return out


def generate_request(body: GenerateBody, n_ctx: int) -> tuple[str, dict[str, Any]]:
    """("chat" or "text", the OpenAI request) for an Ollama generate: the prompt in the model's chat template
    (with ``system``) as Ollama renders it; ``raw`` as it is; with a ``suffix``, fill in the middle."""
    if body.images:
        raise RequestError("images: the loaded pair reads text only", param="images")
    out = _common(body, n_ctx)
    if body.suffix:
        return "text", {**out, "prompt": body.prompt or "", "suffix": body.suffix}
    if body.raw:
        return "text", {**out, "prompt": body.prompt or ""}
    turns = ([{"role": "system", "content": body.system}] if body.system else []) + \
        [{"role": "user", "content": body.prompt or ""}]
    return "chat", {**out, "messages": turns}


# --- what Ollama answers ---------------------------------------------------------------------------------------

def stamp() -> str:
    """Ollama's ``created_at``: RFC 3339 in UTC."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def call_json(index: int, call: ToolCall) -> dict:
    """A call in Ollama's shape: the arguments as a JSON object, not text."""
    try:
        args = json.loads(call.arguments)
    except json.JSONDecodeError:
        args = {}
    return {"function": {"index": index, "name": call.name, "arguments": args if isinstance(args, dict) else {}}}


def chat_chunk(model: str, content: str, calls: list[dict] = ()) -> dict:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {"model": model, "created_at": stamp(), "message": message, "done": False}


def generate_chunk(model: str, text: str) -> dict:
    return {"model": model, "created_at": stamp(), "response": text, "done": False}


def final(base: dict, finish: str, extras: dict, t0: float) -> dict:
    """The last object: done, why, and the durations in nanoseconds (Ollama's names); Tandem's speculative figures
    under ``tandem`` (LM Studio's ``stats``, llama.cpp's ``timings``, OpenAI's ``usage``)."""
    timings = extras["timings"]
    return {**base, "done": True, "done_reason": DONE.get(finish, "stop"),
            "total_duration": int((time.perf_counter() - t0) * 1e9), "load_duration": 0,
            "prompt_eval_count": timings["prompt_n"], "prompt_eval_duration": int(timings["prompt_ms"] * 1e6),
            "eval_count": timings["predicted_n"], "eval_duration": int(timings["predicted_ms"] * 1e6),
            "tandem": {"stats": extras["stats"], "timings": timings, "usage": extras["usage"]}}


def empty(body: _Body) -> bool:
    """Nothing to generate: no messages, or no prompt and no suffix (how Ollama's clients load a model)."""
    if isinstance(body, ChatBody):
        return not body.messages
    return isinstance(body, GenerateBody) and not body.prompt and not body.suffix


def loaded(base: dict, kind: str) -> dict:
    """The answer to a request with nothing to generate (Ollama's way to load a model): done at once."""
    body = {"message": {"role": "assistant", "content": ""}} if kind == "chat" else {"response": ""}
    return {**base, **body, "done": True, "done_reason": "load"}


def _size_label(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _quant(desc: str) -> str:
    """llama.cpp's file type ("all F32", "Q4_K - Medium") as Ollama writes quantisation levels (F32, Q4_K_M)."""
    kind = desc.split(" ", 2)[2] if desc.count(" ") >= 2 else desc
    for long, short in ((" - Medium", "_M"), (" - Small", "_S"), (" - Large", "_L"), ("all ", "")):
        kind = kind.replace(long, short)
    return kind.replace(" ", "_")


def details(target: Any) -> dict:
    arch = target.meta("general.architecture") or ""
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": _size_label(target.n_params), "quantization_level": _quant(target.describe())}


def _modified(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat().replace("+00:00", "Z")


def tag_entry(name: str, pair: Any) -> dict:
    """One model of ``/api/tags``: the loaded pair under its name."""
    return _files_entry(name, [m.path for m in (pair.target, pair.draft) if m is not None], details(pair.target))


def installed_entry(name: str, files: list[Path]) -> dict:
    """One model of ``/api/tags``: an installed pair that is not loaded (its files, the target first), its details
    from the target's header."""
    return _files_entry(name, files, _header_details(files[0]))


def _files_entry(name: str, files: list[Path], facts: dict) -> dict:
    """size is both files'; the digest names the files (their names, sizes and times: hashing gigabytes per
    listing would stall it)."""
    size = sum(p.stat().st_size for p in files)
    digest = hashlib.sha256("\n".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                                      for p in files).encode()).hexdigest()
    return {"name": name, "model": name, "modified_at": _modified(files[0]), "size": size, "digest": digest,
            "details": facts}


def _header_details(target: Path) -> dict:
    try:
        m, _ = meta.read(target)
    except GGUFError:  # listed all the same; loading it would say what is wrong
        return {"parent_model": "", "format": "gguf", "family": "", "families": None}
    return {"parent_model": "", "format": "gguf", "family": m.architecture,
            "families": [m.architecture] if m.architecture else None, "parameter_size": _size_label(m.params),
            "quantization_level": m.quant}


def show_installed(target: Path, draft: Optional[Path]) -> dict:
    """``/api/show`` for an installed pair that is not loaded: what its target's header says (the template and
    the context come once a request loads it)."""
    facts = _header_details(target)
    arch = facts["family"] or "unknown"
    info: dict[str, Any] = {"general.architecture": arch, "tandem.target": target.name,
                            "tandem.draft": draft.name if draft else None, "tandem.loaded": False}
    try:
        m, _ = meta.read(target)
        info.update({"general.parameter_count": m.params, "general.name": m.name or target.stem,
                     f"{arch}.context_length": m.context_length})
    except GGUFError:
        pass
    return {"modelfile": f"# served by Tandem: target {target.name}" + (f", draft {draft.name}" if draft else ""),
            "parameters": "", "template": "", "details": facts, "model_info": info,
            "capabilities": ["completion", "tools"], "modified_at": _modified(target)}


def show(pair: Any, describe: dict, capabilities: list[str]) -> dict:
    """``/api/show``: the template, the facts a client reads (details, model_info, capabilities) and the pair."""
    t = pair.target
    arch = t.meta("general.architecture") or "unknown"
    info: dict[str, Any] = {"general.architecture": arch, "general.parameter_count": t.n_params,
                            "general.name": t.meta("general.name") or t.path.stem}
    trained = t.meta(f"{arch}.context_length")
    if trained and trained.isdigit():
        info[f"{arch}.context_length"] = int(trained)
    draft = describe.get("draft")
    info["tandem.n_ctx"] = describe.get("n_ctx")
    info["tandem.target"] = describe["target"]["file"]
    info["tandem.draft"] = draft["file"] if draft else None
    return {"modelfile": f"# served by Tandem: target {t.path.name}" + (f", draft {draft['file']}" if draft else ""),
            "parameters": "", "template": t.chat_template() or "", "details": details(t), "model_info": info,
            "capabilities": capabilities, "modified_at": _modified(t.path)}
