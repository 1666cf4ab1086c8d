"""The prompts a benchmark runs: the built-in suite (``data/suite.jsonl``, by category; ``fim``: cursor positions
cut from the code in ``data/fim/``, ``fimsuite.py``) or a JSON-lines file of ``{"prompt": ...}``,
``{"messages": [...]}`` or fill-in-the-middle ``{"input_prefix": ..., "input_suffix": ..., "input_extra": [...]}``
objects (llama.cpp's ``/infill`` fields), each line checked (valid UTF-8 and JSON, no lone surrogates, one kind of
prompt, the fields' types) with an error naming the file and line."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional, Sequence

from app.engine.decoding.fim import Chunk, infill_tokens
from app.engine.errors import BadInput
from app.engine.llama.backend import ContextFullError
from app.engine.pair import Pair
from app.lab import fimsuite

CATEGORIES = ("code", "chat", "summarize", "math", "edit")
FIM = "fim"  # the completion suite: not in "all", whose prompts any pair can run
FIM_FIELDS = ("input_prefix", "input_suffix", "input_extra")


class PromptFileError(BadInput, ValueError):
    hint = 'give JSON lines of {"prompt": …}, {"messages": […]} or {"input_prefix": …, "input_suffix": …}'


@dataclass(frozen=True)
class Infill:
    """A fill-in-the-middle request as an editor sends it to llama.cpp's ``/infill``: the text before the cursor,
    after it, other files' chunks, ``prompt``, the text typed on the cursor's line (it follows the prefix), and
    ``n_indent`` (llama.vim's: the cursor line's indentation; a later, shallower line ends the completion)."""

    prefix: str
    suffix: str
    extra: tuple[Chunk, ...] = ()
    prompt: str = ""
    n_indent: int = 0

    def tokens(self, pair: Pair, n_predict: int = -1) -> list[int]:
        """The prompt llama.cpp's server builds for this request (``decoding.fim``); FimUnsupported (a BadInput)
        for a target without FIM tokens, ContextFullError where it does not fit."""
        t = pair.target
        fim = t.fim_tokens()
        fim.require(t.path.name)

        def tokenize(text: str) -> list[int]:  # an editor's text stays text, control-token look-alikes too
            return t.tokenize(text, add_special=False, parse_special=False)

        ids = infill_tokens(tokenize, fim, self.prefix, self.suffix, self.extra, tokenize(self.prompt) if self.prompt
                            else (), n_predict=n_predict, n_ctx=t.n_ctx, bos=t.bos if t.add_bos and t.bos >= 0 else None)
        if len(ids) >= t.n_ctx:
            raise ContextFullError.prompt(len(ids), t.n_ctx)
        return ids


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str = "custom"
    prompt: Optional[str] = None  # raw completion
    messages: Optional[list] = None  # chat
    infill: Optional[Infill] = None  # fill-in-the-middle
    expected: Optional[str] = None  # the FIM suite: the lines cut out at the cursor

    def tokens(self, pair: Pair, n_predict: int = -1) -> list[int]:
        """The prompt's token ids on ``pair``; ``n_predict``: the reply's budget, which a FIM prompt's extra
        chunks leave room for (llama.cpp's budget)."""
        if self.infill is not None:
            return self.infill.tokens(pair, n_predict)
        return pair.chat_prompt(self.messages) if self.messages is not None else pair.completion_prompt(self.prompt)

    @property
    def label(self) -> str:
        if self.infill is not None:
            text = self.infill.prefix.rstrip("\n").rsplit("\n", 1)[-1] + "█" + self.infill.suffix
        else:
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
        if isinstance(obj, dict) and any(k in obj for k in FIM_FIELDS):
            prompts.append(_infill_prompt(obj, f"{source}:{n}", f"{Path(source).stem}-{n}"))
            continue
        if not isinstance(obj, dict) or ("prompt" in obj) == ("messages" in obj):
            raise PromptFileError(f'{source}:{n}: each line needs exactly one of "prompt" or "messages" (or '
                                  '"input_prefix"/"input_suffix" for fill-in-the-middle)')
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


def _infill_prompt(obj: dict, where: str, default_id: str) -> Prompt:
    """A FIM line: ``input_prefix`` and ``input_suffix`` strings (either may be left out: empty), ``input_extra``
    a list of ``{"text", "filename"?}`` objects, an optional ``prompt`` string (llama.cpp's: text after the
    prefix) and ``n_indent`` (a non-negative integer); ``messages`` does not go with them."""
    if "messages" in obj:
        raise PromptFileError(f'{where}: a fill-in-the-middle line (input_prefix/input_suffix) cannot have '
                              '"messages"')
    for key in ("input_prefix", "input_suffix", "prompt"):
        if key in obj and not isinstance(obj[key], str):
            raise PromptFileError(f'{where}: "{key}" must be a string')
    extra = obj.get("input_extra", [])
    if not isinstance(extra, list):
        raise PromptFileError(f'{where}: "input_extra" must be a list of {{"filename", "text"}} objects')
    chunks = []
    for i, chunk in enumerate(extra):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str) \
                or not isinstance(chunk.get("filename", ""), str):
            raise PromptFileError(f'{where}: input_extra[{i}] must be an object with a "text" string and an '
                                  'optional "filename" string')
        chunks.append(Chunk(chunk["text"], chunk.get("filename", "tmp")))
    n_indent = obj.get("n_indent", 0)
    if not isinstance(n_indent, int) or isinstance(n_indent, bool) or n_indent < 0:
        raise PromptFileError(f'{where}: "n_indent" must be a non-negative integer, not {json.dumps(n_indent)}')
    infill = Infill(obj.get("input_prefix", ""), obj.get("input_suffix", ""), tuple(chunks), obj.get("prompt", ""),
                    n_indent)
    return Prompt(id=str(obj.get("id", default_id)), category=str(obj.get("category", FIM)), infill=infill)


def fim_suite() -> list[Prompt]:
    """The completion suite: ``fimsuite.cuts`` of the code in ``data/fim/`` as editors' requests."""
    out = []
    for source in fimsuite.SOURCES:
        text = resources.files("app.lab").joinpath(f"data/fim/{source.name}.txt").read_text(encoding="utf-8")
        for cut in fimsuite.cuts(text, fimsuite.PER_FILE):
            out.append(Prompt(id=f"fim-{source.name}-{cut.line}", category=FIM, expected=cut.middle,
                              infill=Infill(cut.prefix, cut.suffix)))
    return out


def has_infill(prompts: Sequence[Prompt]) -> bool:
    return any(p.infill is not None for p in prompts)


def require_fim(pair: Pair, prompts: Sequence[Prompt]) -> None:
    """PromptFileError (a clear refusal, before any run) where fill-in-the-middle prompts meet a target without
    FIM tokens."""
    gone = pair.target.fim_tokens().missing() if has_infill(prompts) else []
    if gone:
        ids = [p.id for p in prompts if p.infill is not None]
        raise PromptFileError(f"{len(ids)} fill-in-the-middle prompt{'s' if len(ids) > 1 else ''} ({ids[0]}"
                              f"{', …' if len(ids) > 1 else ''}) but {Path(pair.target.path).name} has no "
                              f"{', '.join(gone)} token{'s' if len(gone) > 1 else ''} for fill-in-the-middle; use "
                              "a code model trained for it (e.g. the demo-qwen-coder pair)")


def builtin_suite(category: str = "all") -> list[Prompt]:
    if category.strip() == FIM:
        return fim_suite()
    text = resources.files("app.lab").joinpath("data/suite.jsonl").read_text(encoding="utf-8")
    prompts = parse_prompts(text.splitlines(), "suite.jsonl")
    wanted = set(CATEGORIES) if category == "all" else {c.strip() for c in category.split(",")}
    if FIM in wanted:
        raise PromptFileError(f"--suite {FIM} runs alone (its prompts are editors' fill-in-the-middle requests), "
                              f"not in a list: {category!r}")
    if not wanted <= set(CATEGORIES):
        raise PromptFileError(f"unknown suite {category!r}; choose all, {FIM}, or one or more (comma-separated) "
                              f"of {', '.join(CATEGORIES)}")
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
