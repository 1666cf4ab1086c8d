"""Where a fill-in-the-middle completion ends, token by token, as llama.cpp's server decides it
(``process_token`` in tools/server/server-context.cpp), plus one rule of Tandem's own:

- **stop strings**: the text is cut before the first one; text that could still become one is held back;
- **n_indent**: once a newline has been generated, a later line whose indentation (spaces and tabs) is less than
  ``n_indent`` ends the completion, cut after that line's indentation. llama.cpp checks one line per token, the
  line after the newline it last found, and never the first line (the cursor's);
- **t_max_predict_ms**: a token whose released text holds a newline, arriving more than this many milliseconds
  after decoding began, ends the completion (with it);
- **the suffix** (``stop_at_suffix``, Tandem's): a generated line equal to the suffix's first whole non-blank line
  means the model has finished the middle and is copying what follows the cursor (Qwen2.5-Coder Instruct does in
  the repo-level layout); the completion ends before that copy.

The rules read the target's own tokens in order, so greedy output is the same whatever speculation produced them.
:class:`InfillCut` also says which prefix of the text is safe to stream: nothing a later rule could still cut
(llama.cpp streams the first token of a line that its indentation rule then cuts; Tandem holds it back, so that a
streamed completion reads the same as a whole one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from app.engine.events import StrEnum
from app.engine.decoding.stops import find_stop, held_back


class StopType(StrEnum):
    """llama.cpp's ``stop_type``."""

    NONE = "none"  # not stopped (yet), or the client went away
    EOS = "eos"  # an end-of-generation token
    WORD = "word"  # a stop string (or the suffix's copy)
    LIMIT = "limit"  # n_predict, n_indent, t_max_predict_ms or the context


@dataclass(frozen=True)
class SuffixStop:
    """The suffix's first whole non-blank line, and what the suffix holds before it."""

    line: str  # that line, without its trailing whitespace
    before: str  # the suffix's text before the line (the rest of the cursor's line, blank lines)
    fragment: str  # the rest of the cursor's line, stripped ("" when the cursor is at a line's start)
    at_line_start: bool  # the completion begins a line (the prefix is empty or ends with a newline)

    @classmethod
    def of(cls, prefix: str, suffix: str) -> Optional["SuffixStop"]:
        """None when the suffix has no whole non-blank line (nothing to recognise a copy by)."""
        at_start = prefix == "" or prefix.endswith("\n")
        pos, fragment = 0, ""
        for i, line in enumerate(suffix.splitlines(keepends=True)):
            if i == 0 and not at_start:
                fragment = line.strip()  # the cursor's own line: not a whole line
            elif line.strip():
                return cls(line.rstrip(), suffix[:pos], fragment, at_start)
            pos += len(line)
        return None

    def middle(self, head: str) -> str:
        """The completion when the copy of ``line`` begins where ``head`` ends: ``head`` less its own copy of the
        suffix's text before the line (exact, or up to blank lines and the cursor line's rest)."""
        if not self.before or head.endswith(self.before):
            return head[:len(head) - len(self.before)]
        out = head.rstrip()
        return out[:len(out) - len(self.fragment)] if self.fragment and out.endswith(self.fragment) else out

    def could_start(self, partial: str) -> bool:
        """Whether an unfinished line could still turn out to be ``line``."""
        return not partial.strip() or self.line.startswith(partial.rstrip())


@dataclass
class Rules:
    stops: Sequence[str] = ()
    n_indent: int = 0
    t_max_predict_ms: float = 0.0  # <= 0: no limit
    suffix: Optional[SuffixStop] = None


def _indent(text: str, pos: int) -> int:
    n = pos
    while n < len(text) and text[n] in " \t":
        n += 1
    return n - pos


@dataclass
class InfillCut:
    """llama.cpp's per-token end rules over the generated text (``feed`` each token, ``finish`` at the end)."""

    rules: Rules
    text: str = ""  # llama.cpp's generated_text: what the completion is so far, cuts applied
    sent: int = 0  # llama.cpp's n_sent_text (its stop-string hold-back)
    tokens: int = 0  # tokens read, through the one that ended the completion
    has_new_line: bool = False
    last_nl: int = 0  # llama.cpp's last_nl_pos: where the next line to check begins (0: none yet)
    stop: StopType = StopType.NONE
    stopping_word: str = ""
    ended: bool = False  # a rule ended the completion (the generation should stop)
    next_line: int = -1  # where the next line the suffix rule looks at begins (-1: not found yet)

    def feed(self, piece: str, ms: Optional[float] = None) -> bool:
        """Read one token's text (``ms``: milliseconds since decoding began when it arrived); False once a rule
        has ended the completion (later tokens are not read)."""
        if self.ended:
            return False
        self.tokens += 1
        self._token(piece, ms)
        return not self.ended

    def finish(self, eog: bool) -> None:
        """The generation is over; llama.cpp reads an end-of-generation token as one more token with no text."""
        if not self.ended and eog:
            self._token("", None)
        if not self.ended and self.rules.suffix is not None:
            self._suffix(final=True)
        if not self.ended and eog:
            self.stop = StopType.EOS

    def _token(self, piece: str, ms: Optional[float]) -> None:
        r = self.rules
        self.text += piece
        pos = min(self.sent, len(self.text))
        send = True
        at = find_stop(self.text[pos:], r.stops) if r.stops else None
        if at is not None:
            word = min((s for s in r.stops if self.text.startswith(s, pos + at)), key=len)
            self.text = self.text[:pos + at]
            self._end(StopType.WORD, word)
            pos = min(self.sent, len(self.text))
        elif r.stops and piece:
            send = held_back(self.text[pos:], r.stops) == 0
        released = self.text[pos:] if send else ""
        self.sent += len(released)
        if self.has_new_line and r.n_indent > 0:
            if self.last_nl > 0:
                n = _indent(self.text, self.last_nl)
                if self.last_nl + n < len(self.text) and n < r.n_indent:
                    self.text = self.text[:self.last_nl + n]  # llama.cpp keeps the short line's indentation
                    self._end(StopType.LIMIT)
            nl = self.text.find("\n", self.last_nl)
            if nl >= 0:
                self.last_nl = nl + 1
        if "\n" in released:
            self.has_new_line = True
            if r.t_max_predict_ms > 0 and ms is not None and ms > r.t_max_predict_ms:
                self._end(StopType.LIMIT)
        if not self.ended and r.suffix is not None:
            self._suffix(final=False)

    def _end(self, stop: StopType, word: str = "") -> None:
        if not self.ended:
            self.stop, self.stopping_word, self.ended = stop, word, True

    def _suffix(self, final: bool) -> None:
        """End before a whole line equal to the suffix's first line (the last, unfinished line too when final)."""
        s = self.rules.suffix
        assert s is not None
        text, start = self.text, self.next_line
        if start < 0:  # the cursor's line is not a whole line: the first one begins after a newline
            if s.at_line_start:
                start = 0
            else:
                nl = text.find("\n")
                if nl < 0:
                    return
                start = nl + 1
        while True:
            self.next_line = start
            end = text.find("\n", start)
            if end < 0 and not final:
                return  # unfinished: looked at again after the next token
            line = text[start:] if end < 0 else text[start:end]
            if line.rstrip() == s.line:
                self.text = s.middle(text[:start])
                self._end(StopType.WORD, s.line)
                return
            if end < 0:
                return
            start = end + 1

    def releasable(self, final: bool) -> str:
        """The prefix of the text no rule can cut any more (all of it once over or ended)."""
        text = self.text
        if final or self.ended:
            return text
        r, safe = self.rules, len(text)
        if r.stops:
            safe = min(safe, len(text) - held_back(text, r.stops))
        if r.n_indent > 0:
            safe = min(safe, self._indent_safe())
        if r.suffix is not None:
            safe = min(safe, self._suffix_safe(r.suffix))
        return text[:max(safe, 0)]

    def _indent_safe(self) -> int:
        """Where the first line that the indentation rule may still cut begins."""
        text, need = self.text, self.rules.n_indent
        starts = ([self.last_nl] if self.last_nl > 0 else []) + [
            i + 1 for i in range(max(self.last_nl, 0), len(text)) if text[i] == "\n"]
        for p in starts:
            if _indent(text, p) < need:
                return p
        return len(text)

    def _suffix_safe(self, s: SuffixStop) -> int:
        """Where the text a copy of the suffix could still remove begins: the copy may begin at the unfinished line
        (``now``) or at a later line, and takes with it the model's copy of the suffix's text before that line."""
        text = self.text
        cur = text.rfind("\n") + 1
        now = (cur > 0 or s.at_line_start) and s.could_start(text[cur:])
        if not s.before:
            return cur if now else len(text)
        if now:
            return min(cur - len(s.before), len(text[:cur].rstrip()) - len(s.fragment))
        return min(len(text) - held_back(text, [s.before]), len(text.rstrip()) - len(s.fragment))
