"""The completion suite's cursor positions, cut from real code (``data/fim/``, see its NOTICE.md) at line
boundaries: one to three whole lines taken out as the middle, the cursor left on an empty line where they were
(the editor's state after opening a line), the lines before it the prefix and the rest of the cursor's line (its
end) and the lines after it the suffix, as llama.vim lays a request out. Pure functions of the text, so every run
cuts the same positions."""

from __future__ import annotations

from dataclasses import dataclass

# The window around the cursor: llama.vim sends 256 lines before and 64 after; a smaller one keeps each request's
# prompt near 500 tokens, whose prefill (about 80 tokens/s for a 1.5B target on a 2-core CPU) would otherwise be
# most of every request.
PREFIX_LINES = 32
SUFFIX_LINES = 16
MIN_PREFIX = 6  # a cursor has at least this many lines above it
MAX_MIDDLE = 3  # lines taken out: 1, 2, 3, 1, … by position
PER_FILE = 3


@dataclass(frozen=True)
class Source:
    name: str  # the file's own name (stored as NAME.txt)
    language: str


SOURCES = (Source("prompts.py", "Python"), Source("inspector.js", "JavaScript"),
           Source("serve-static.js", "JavaScript"), Source("ggml-alloc.c", "C"))


@dataclass(frozen=True)
class Cut:
    line: int  # the cursor's line, 1-based
    prefix: str
    middle: str  # the lines taken out, without the last one's end (that stays, as the cursor's line)
    suffix: str


def positions(lines: list[str], count: int) -> list[int]:
    """``count`` cursor lines (0-based), evenly spread over the non-blank lines that have ``MIN_PREFIX`` lines
    above them and at least one line below them."""
    candidates = [i for i, line in enumerate(lines) if line.strip() and MIN_PREFIX <= i < len(lines) - 1]
    if len(candidates) < count:
        raise ValueError(f"a source of {len(lines)} lines has {len(candidates)} places for a cursor, not {count}")
    return [candidates[(2 * j + 1) * len(candidates) // (2 * count)] for j in range(count)]


def cut(lines: list[str], at: int, n: int) -> Cut:
    """The request with ``lines[at:at + n]`` taken out (``lines`` keep their ends)."""
    n = max(1, min(n, len(lines) - 1 - at))  # at least one line stays below the cursor
    middle = "".join(lines[at:at + n])
    return Cut(line=at + 1, prefix="".join(lines[max(0, at - PREFIX_LINES):at]), middle=middle.removesuffix("\n"),
               suffix="\n" + "".join(lines[at + n:at + n + SUFFIX_LINES]))


def cuts(text: str, count: int = PER_FILE) -> list[Cut]:
    """The suite's requests from one source file: ``count`` positions, the j-th taking out ``1 + j % 3`` lines."""
    lines = text.splitlines(keepends=True)
    return [cut(lines, at, 1 + j % MAX_MIDDLE) for j, at in enumerate(positions(lines, count))]
