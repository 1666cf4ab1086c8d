"""The prompts a benchmark runs: the built-in suite (``data/suite.jsonl``, by category) or a JSON-lines file of
``{"prompt": ...}`` or ``{"messages": [...]}`` objects, each line checked (valid UTF-8 and JSON, no lone
surrogates, exactly one of the two fields) with an error naming the file and line."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional, Sequence

from app.engine.errors import BadInput
from app.engine.pair import Pair

CATEGORIES = ("code", "chat", "summarize", "math", "edit")


class PromptFileError(BadInput, ValueError):
    hint = 'give JSON lines of {"prompt": …} or {"messages": […]}'


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str = "custom"
    prompt: Optional[str] = None  # raw completion
    messages: Optional[list] = None  # chat

    def tokens(self, pair: Pair) -> list[int]:
        return pair.chat_prompt(self.messages) if self.messages is not None else pair.completion_prompt(self.prompt)

    @property
    def label(self) -> str:
        text = self.prompt if self.messages is None else self.messages[-1].get("content", "")
        return text.strip().replace("\n", " ")[:60]


def parse_prompts(lines: Sequence[str], source: str) -> list[Prompt]:
    prompts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{source}:{n}: not valid JSON ({exc.msg})") from None
        if _has_surrogate(obj):
            raise PromptFileError(f"{source}:{n}: holds a lone surrogate escape (such as \\ud800), which is not "
                                  "text; remove it")
        if not isinstance(obj, dict) or ("prompt" in obj) == ("messages" in obj):
            raise PromptFileError(f'{source}:{n}: each line needs exactly one of "prompt" or "messages"')
        if "prompt" in obj and not isinstance(obj["prompt"], str):
            raise PromptFileError(f'{source}:{n}: "prompt" must be a string')
        if "messages" in obj and not (isinstance(obj["messages"], list) and obj["messages"] and all(
                isinstance(m, dict) and "role" in m and "content" in m for m in obj["messages"])):
            raise PromptFileError(f'{source}:{n}: "messages" must be a list of {{"role", "content"}} objects')
        prompts.append(Prompt(id=str(obj.get("id", f"{Path(source).stem}-{n}")),
                              category=str(obj.get("category", "custom")),
                              prompt=obj.get("prompt"), messages=obj.get("messages")))
    if not prompts:
        raise PromptFileError(f"{source}: no prompts")
    return prompts


def builtin_suite(category: str = "all") -> list[Prompt]:
    text = resources.files("app.lab").joinpath("data/suite.jsonl").read_text(encoding="utf-8")
    prompts = parse_prompts(text.splitlines(), "suite.jsonl")
    wanted = set(CATEGORIES) if category == "all" else {c.strip() for c in category.split(",")}
    if not wanted <= set(CATEGORIES):
        raise PromptFileError(f"unknown suite {category!r}; choose all, or one or more (comma-separated) of "
                              f"{', '.join(CATEGORIES)}")
    return [p for p in prompts if p.category in wanted]


def load_prompts(path: Optional[str | Path] = None, category: str = "all") -> list[Prompt]:
    if path is None:
        return builtin_suite(category)
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(f"cannot read prompts file {path}: {exc.strerror}") from None
    return parse_prompts(_decode_lines(raw, str(path)), str(path))


def _decode_lines(raw: bytes, source: str) -> list[str]:
    """The lines of a UTF-8 file; bytes that are not UTF-8 are an error naming the line and column."""
    lines = []
    for n, line in enumerate(raw.splitlines(), 1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise PromptFileError(f"{source}:{n}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                                  f"{exc.start + 1}); save the file as UTF-8") from None
    return lines


def _has_surrogate(value) -> bool:
    """Whether a JSON value holds a lone surrogate (``"\\ud800"``): JSON allows it, UTF-8 cannot encode it."""
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return isinstance(value, str) and _SURROGATE.search(value) is not None


_SURROGATE = re.compile("[\ud800-\udfff]")
