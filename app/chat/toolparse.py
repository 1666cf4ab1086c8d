"""A reply read back into text and tool calls, as it streams (the styles of toolcalls.py).

:class:`ToolCallParser` takes the reply's text as it arrives (``feed``) and hands out what is certain so far:
content that can no longer turn into a call, and each call once it is whole; ``finish`` reads what is left at
the end of the reply. Styles:
- Hermes/Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks among ordinary text (text that
  might be the start of ``<tool_call>`` is held back until it is not); and, as llama.cpp's Hermes-2-Pro parser
  reads them, a call written as a fenced block (```` ```json\n{"name": ..., "arguments": {...}}\n``` ````) or as
  bare JSON at the start of the reply, which Qwen2.5-Coder writes when the choice is ``auto``. Those two must be
  shaped as a call (``name`` and ``arguments``, nothing else) so an ordinary JSON example stays text;
- Llama 3.1: a reply that is a JSON call ``{"name": ..., "parameters": {...}}`` (several joined by ``;``), with or
  without ``<|python_tag|>``; any other reply is content;
- generic (llama.cpp's fallback): the reply is JSON, ``{"tool_call": {...}}``, ``{"tool_calls": [...]}`` or
  ``{"response": "..."}``; a response's text streams as it is decoded.
A block that does not parse as a call is content, so nothing the model wrote is lost; but a call the reply's end
cut short (``max_tokens``) is neither a call nor content: half a call is never handed out as text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional, Union

from app.chat.toolcalls import ToolCall, ToolStyle

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FENCE = "```"
PYTHON_TAG = "<|python_tag|>"
CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_DECODER = json.JSONDecoder()


class Head(str, Enum):
    """What a fence or a brace in a Hermes reply starts, as far as the text so far tells."""

    CALL = "call"  # a tool call's JSON begins here
    MORE = "more"  # too early to tell
    NO = "no"  # ordinary text


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int  # the call's position among this reply's calls (OpenAI's ``tool_calls[].index``)
    call: ToolCall


Delta = Union[ContentDelta, ToolCallDelta]


@dataclass
class ParsedReply:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def finish_reason(self) -> Optional[str]:
        """``tool_calls`` when the reply called tools (else the generation's own reason applies)."""
        return "tool_calls" if self.tool_calls else None


def _as_call(obj: Any, args_keys: tuple[str, ...] = ("arguments",)) -> Optional[ToolCall]:
    """A ToolCall from {"name": ..., "arguments": {...}} (arguments as JSON text), or None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args: Any = next((obj[k] for k in args_keys if k in obj), {})
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    call_id = obj.get("id")
    return ToolCall(obj["name"], text, call_id) if isinstance(call_id, str) and call_id else ToolCall(obj["name"], text)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None


def _held_prefix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``marker`` (may still become it)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _object_head(text: str, i: int) -> Head:
    """Does ``text[i:]`` open a JSON object whose first key is ``"name"`` (llama.cpp's ``\\{\\s*"name"``)?"""
    if i >= len(text):
        return Head.MORE
    if text[i] != "{":
        return Head.NO
    j = _skip_space(text, i + 1)
    rest = text[j:]
    if rest.startswith('"name"'):
        k = _skip_space(text, j + len('"name"'))
        return Head.MORE if k >= len(text) else Head.CALL if text[k] == ":" else Head.NO
    return Head.MORE if '"name"'.startswith(rest) else Head.NO


def fenced_head(text: str) -> tuple[Head, int]:
    """``text`` starts with a fence: (whether a call follows, where its JSON starts). As llama.cpp's Hermes-2-Pro
    ``open_regex``: ```` ``` ```` with ``json``, ``xml`` or no language, a newline, space, an optional
    ``<tool_call>``, then the object."""
    i = len(FENCE)
    for lang in ("json", "xml"):
        if text.startswith(lang, i):
            i += len(lang)
            break
        if lang.startswith(text[i:]) and len(text) - i < len(lang):
            return Head.MORE, 0
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text):
        return Head.MORE, 0
    if text[i] != "\n":
        return Head.NO, 0
    i = _skip_space(text, i + 1)
    if text.startswith(OPEN, i):
        i = _skip_space(text, i + len(OPEN))
    elif i < len(text) and OPEN.startswith(text[i:]):
        return Head.MORE, 0
    head = _object_head(text, i)
    return head, i if head == Head.CALL else 0


def _strict_call(obj: Any) -> Optional[ToolCall]:
    """A call written outside ``<tool_call>``: exactly a call's keys, so {"name": "Ada", "age": 36} stays text."""
    if not isinstance(obj, dict) or not set(obj) <= CALL_KEYS or not ({"arguments", "parameters"} & set(obj)):
        return None
    return _as_call(obj, ("arguments", "parameters"))


_RESPONSE_HEAD = re.compile(r'\s*\{\s*"response"\s*:\s*"')
_CALL_HEAD = re.compile(r'\s*\{\s*"tool_calls?"\s*:')


def _string_prefix(raw: str) -> tuple[str, int, bool]:
    """Decode the JSON string body at the start of ``raw``: (text, characters consumed, closed)."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == '"':
            return "".join(out), i + 1, True
        if c == "\\":
            if i + 1 >= len(raw):
                break
            if raw[i + 1] == "u":
                if i + 6 > len(raw):
                    break
                out.append(json.loads(f'"{raw[i:i + 6]}"'))  # (a lone surrogate half decodes to itself)
                i += 6
                continue
            out.append(json.loads(f'"{raw[i:i + 2]}"'))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out), i, False


class ToolCallParser:
    def __init__(self, style: ToolStyle):
        self.style = style
        self.buf = ""  # text received and not yet handed out
        self.reply = ParsedReply()
        self._inside = False  # Hermes: inside a <tool_call> block
        self._plain = False  # Hermes: the reply has begun with text (a bare JSON call can no longer open it)
        self._mode: Optional[str] = None  # Llama 3 / generic: "content", "call", (generic) "response", "json"

    def feed(self, text: str) -> list[Delta]:
        self.buf += text
        if self.style == ToolStyle.HERMES:
            return self._hermes(final=False)
        if self.style == ToolStyle.LLAMA3:
            return self._llama3(final=False)
        return self._generic(final=False)

    def finish(self) -> tuple[list[Delta], ParsedReply]:
        """What is left, and the whole reply."""
        if self.style == ToolStyle.HERMES:
            out = self._hermes(final=True)
        elif self.style == ToolStyle.LLAMA3:
            out = self._llama3(final=True)
        else:
            out = self._generic(final=True)
        return out, self.reply

    def _content(self, text: str) -> list[Delta]:
        if not text:
            return []
        self.reply.content += text
        return [ContentDelta(text)]

    def _call(self, call: ToolCall) -> list[Delta]:
        self.reply.tool_calls.append(call)
        return [ToolCallDelta(len(self.reply.tool_calls) - 1, call)]

    # --- Hermes / Qwen ---------------------------------------------------------------------------------

    def _hermes(self, final: bool) -> list[Delta]:
        out: list[Delta] = []
        while True:
            if self._inside:
                at = self.buf.find(CLOSE)
                if at < 0 and not final:
                    return out
                body = self.buf if at < 0 else self.buf[:at]
                call = _as_call(_loads(body.strip()))
                if call:
                    out += self._call(call)
                elif at >= 0:  # a closed block that is not a call: the model's text
                    out += self._content(OPEN + body + CLOSE)
                self.buf, self._inside = ("" if at < 0 else self.buf[at + len(CLOSE):]), False  # (cut: dropped)
                if at < 0:
                    return out
                continue
            at = self._next_marker()
            if at < 0:
                keep = 0 if final else max(_held_prefix(self.buf, OPEN), _held_prefix(self.buf, FENCE))
                text = self.buf[:len(self.buf) - keep]
                if not final and not text.strip() and (self._at_start() or self.reply.tool_calls):
                    return out  # space before a call is not content: wait for what follows it
                out += self._content(text if text.strip() or not self.reply.tool_calls else "")
                self.buf = self.buf[len(self.buf) - keep:]
                return out
            before, rest = self.buf[:at], self.buf[at:]
            fenced, start = rest.startswith(FENCE), 0
            if rest.startswith(OPEN):
                head = Head.CALL
            elif fenced:
                head, start = fenced_head(rest)
            else:
                head = _object_head(rest, 0)
            if head == Head.MORE and not final:
                if before.strip():
                    out += self._content(before)
                    self.buf = rest
                return out
            if head != Head.CALL:  # ordinary text: past the fence or brace, look for the next marker
                n = len(FENCE) if fenced else 1
                out += self._content(before + rest[:n])
                self.buf, self._plain = rest[n:], True
                continue
            out += self._content(before if before.strip() else "")  # (whitespace between calls is not content)
            self.buf = rest
            if rest.startswith(OPEN):
                self.buf, self._inside = rest[len(OPEN):], True
                continue
            step = self._json_call(start, fenced, final)
            if step is None:
                return out
            out += step

    def _at_start(self) -> bool:
        """Only space (or calls) so far: a bare JSON call may still begin the reply."""
        return not self._plain and not self.reply.content.strip()

    def _next_marker(self) -> int:
        """Where the next possible call begins: ``<tool_call>``, a fence, or a brace opening the reply."""
        found = [i for i in (self.buf.find(OPEN), self.buf.find(FENCE)) if i >= 0]
        lead = _skip_space(self.buf, 0)
        if self._at_start() and lead < len(self.buf) and self.buf[lead] == "{":
            found.append(lead)
        return min(found, default=-1)

    def _json_call(self, start: int, fenced: bool, final: bool) -> Optional[list[Delta]]:
        """The call whose JSON starts at ``buf[start]`` (in a fence or bare): its delta, the text it turned out to
        be, [] for a call the reply's end cut short, or None to wait for more text."""
        try:
            obj, end = _DECODER.raw_decode(self.buf, start)
        except json.JSONDecodeError:
            closed = fenced and FENCE in self.buf[start:]
            if not final and not closed:
                return None
            if closed:  # a fenced block that is not JSON: the model's text, up to its closing fence
                end = self.buf.index(FENCE, start) + len(FENCE)
                text, self.buf, self._plain = self.buf[:end], self.buf[end:], True
                return self._content(text)
            self.buf = ""  # cut short by the reply's end: neither a call nor text
            return []
        k = _skip_space(self.buf, end)
        if not final and len(self.buf) - k < len(CLOSE) and CLOSE.startswith(self.buf[k:]):
            return None  # (a closing tag may follow)
        if self.buf.startswith(CLOSE, k):
            k = _skip_space(self.buf, k + len(CLOSE))
        if fenced:
            if not final and len(self.buf) - k < len(FENCE) and FENCE.startswith(self.buf[k:]):
                return None
            if self.buf.startswith(FENCE, k):
                k += len(FENCE)
        call = _strict_call(obj)
        text, self.buf = self.buf[:k], self.buf[k:]
        if call is None:
            self._plain = True
            return self._content(text)
        return self._call(call)

    # --- Llama 3.1 ---------------------------------------------------------------------------------------

    def _llama3(self, final: bool) -> list[Delta]:
        if self._mode is None:
            head = self.buf.lstrip()
            if not head or (PYTHON_TAG.startswith(head) and not final):
                return []
            self._mode = "call" if head.startswith((PYTHON_TAG, "{")) else "content"
        if self._mode == "content":
            text, self.buf = self.buf, ""
            return self._content(text)
        if not final:
            return []
        body = self.buf.strip()
        body = body[len(PYTHON_TAG):] if body.startswith(PYTHON_TAG) else body
        calls = [_as_call(_loads(part), ("parameters", "arguments")) for part in body.split(";") if part.strip()]
        if calls and all(calls):
            out: list[Delta] = []
            for call in calls:
                out += self._call(call)
            self.buf = ""
            return out
        text, self.buf = self.buf, ""
        return self._content(text)

    # --- generic (llama.cpp's JSON fallback) -------------------------------------------------------------

    def _generic(self, final: bool) -> list[Delta]:
        if self._mode is None:
            head = _RESPONSE_HEAD.match(self.buf)
            if head:
                self._mode, self.buf = "response", self.buf[head.end():]
            elif _CALL_HEAD.match(self.buf):
                self._mode = "call"
            elif self.buf.strip() and not self.buf.lstrip().startswith("{"):
                self._mode = "content"  # not JSON at all: streams as it comes
            elif final or len(self.buf) > 64:
                self._mode = "json"  # JSON of another shape: read whole at the end
            else:
                return []
        if self._mode == "response":
            text, used, closed = _string_prefix(self.buf)
            self.buf = self.buf[used:]
            if closed:
                self._mode, self.buf = "done", ""
            return self._content(text)
        if self._mode == "content":
            text, self.buf = self.buf, ""
            return self._content(text)
        if self._mode == "json":
            if not final:
                return []
            obj = _loads(self.buf)
            text, self.buf = (obj["response"] if isinstance(obj, dict) and isinstance(obj.get("response"), str)
                              else self.buf), ""
            return self._content(text)
        if self._mode == "call":
            obj = _loads(self.buf)
            if obj is None and not final:
                return []
            calls = obj.get("tool_calls") if isinstance(obj, dict) else None
            if calls is None and isinstance(obj, dict):
                calls = [obj.get("tool_call")]
            parsed = [_as_call(c) for c in calls] if isinstance(calls, list) else []
            if parsed and all(parsed):
                out: list[Delta] = []
                for call in parsed:
                    out += self._call(call)
                self._mode, self.buf = "done", ""
                return out
            if not final:
                return []
            text, self.buf, self._mode = self.buf, "", "done"
            return self._content(text) if obj is not None else []  # (unparsable at the end: a cut call, dropped)
        self.buf = ""  # "done": trailing whitespace after the JSON
        return []
