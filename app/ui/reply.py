"""A chat reply as Markdown with every token's provenance coloured in place: pure functions.

The reply text is parsed as Markdown first (markdown-it, CommonMark with tables and strikethrough; raw HTML
and images off), then each piece of text the renderer writes (paragraph text, inline code, code blocks) is
located in the raw reply and split into runs by the token that produced each character. A run becomes a
``<span class="tdm-tok tdm-KIND">``, so colour never splits Markdown syntax: a ``**`` or a code fence is
parsed before any span exists. Everything written is escaped.

Tokens are small dicts (``compact``): ``t`` text, ``k`` kind, ``s`` step, ``p`` draft position (0-based),
``q`` the draft's probability, ``d`` the draft's own token where the target corrected it, ``w`` which drafter
proposed it ("lookup" or "draft"; lookup's tokens also get the class ``tdm-lookup``).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence

from markdown_it import MarkdownIt

from app.engine.events import Drafter, TokenEvent
from app.engine.names import DraftKind
from app.service.chat import ChatMode

from app.ui.panel import KIND_LABELS, esc, visible

COMPLETION = ChatMode.COMPLETION
WINDOW = 400  # how far past the cursor a rendered piece may start (Markdown syntax, link targets…)
_LANG = re.compile(r"[^\w+#.-]")


def compact(tokens: Sequence[TokenEvent], draft_texts: Optional[dict] = None,
            drafter: Optional[str] = None) -> list[dict]:
    """TokenEvents → the dicts the renderer and the chat history keep (JSON-friendly). ``drafter``: what proposed
    the tokens a model drafted, in words (``runner.drafter_words``); their ``w`` says so ("draft" where unknown)."""
    draft_texts = draft_texts or {}
    out = []
    for t in tokens:
        item = {"t": t.text, "k": t.kind, "s": t.step, "p": t.draft_pos, "q": t.draft_prob}
        if t.drafter is not None:
            item["w"] = drafter if t.drafter == Drafter.MODEL and drafter and drafter != DraftKind.MODEL \
                else str(t.drafter)
        if t.index in draft_texts:
            item["d"] = draft_texts[t.index]
        out.append(item)
    return out


def label(tok: dict) -> str:
    """What a screen reader says for a focused token: its text, its kind and which drafter proposed it (the
    page script says the same for the token the arrow keys move to)."""
    kind = KIND_LABELS[tok["k"]][0] if tok["k"] in KIND_LABELS else tok["k"]  # the legend's words
    return f'{tok["t"].strip() or "whitespace"}: {kind}{proposed_by(tok.get("w"))}'


def proposed_by(who: Optional[str]) -> str:
    """", proposed by …" for a token's ``w`` (the page script's ``proposedBy`` says the same); "" for none."""
    if not who:
        return ""
    return ", proposed by prompt lookup" if who == Drafter.LOOKUP else \
        f", proposed by the {'draft model' if who == Drafter.MODEL else who}"


# A reply is one tab stop: its first token span has tabindex 0 and the arrow keys move along the others (a roving
# tabindex, in the page script), so a 400-token reply adds one stop to the Tab order, not 400, and no attributes
# to the tokens that are not focused.
STOP = ' tabindex="0" role="button"'


def span(tokens: Sequence[dict], i: int, body: str, extra: str = "", stop: bool = False) -> str:
    """One run of token ``i``'s text; the data attributes feed the inspector (positions count from 1);
    ``stop``: the reply's tab stop (see STOP)."""
    tok = tokens[i]
    attrs = f' data-s="{tok["s"] + 1}"'
    if tok.get("p") is not None:
        attrs += f' data-p="{tok["p"] + 1}"'
    if tok.get("q") is not None:
        attrs += f' data-q="{tok["q"]:.2f}"'
    if "d" in tok:
        attrs += f' data-d="{esc(visible(tok["d"]))}" data-t="{esc(visible(tok["t"]))}"'
    who = tok.get("w")
    if who:
        attrs += f' data-w="{esc(who)}"'
    lookup = " tdm-lookup" if who == Drafter.LOOKUP else ""
    if stop:
        attrs += f'{STOP} aria-label="{esc(label(tok))}"'
    return f'<span class="tdm-tok tdm-{esc(tok["k"])}{lookup}"{attrs}{extra}>{body}</span>'


class _Colourer:
    """Walks the raw reply alongside the renderer, which writes text in document order."""

    def __init__(self, tokens: Sequence[dict], extra: Optional[Callable[[int], str]] = None):
        self.tokens = tokens
        self.extra = extra  # more attributes for token i's spans (Compare's replay: when it appears)
        self.src = "".join(t["t"] for t in tokens)
        self.owner = [i for i, t in enumerate(tokens) for _ in t["t"]]
        self.pos = 0
        self.stopped = False  # the reply's tab stop is written (the first token span)

    def owners(self, piece: str) -> list[Optional[int]]:
        out: list[Optional[int]] = []
        for seg in re.split(r"(?<=\n)", piece):
            if not seg:
                continue
            j = self.src.find(seg, self.pos, self.pos + len(seg) + WINDOW)
            if j >= 0:
                out += self.owner[j:j + len(seg)]
                self.pos = j + len(seg)
                continue
            for ch in seg:  # the piece differs from the source (an entity, a stripped indent…): char by char
                j = self.src.find(ch, self.pos, self.pos + WINDOW)
                out.append(None if j < 0 else self.owner[j])
                self.pos = self.pos if j < 0 else j + 1
        return out

    def html(self, piece: str) -> str:
        if not self.tokens:
            return esc(piece)
        owners, parts, i = self.owners(piece), [], 0
        while i < len(piece):
            j = i
            while j < len(piece) and owners[j] == owners[i]:
                j += 1
            body = esc(piece[i:j])
            owner = owners[i]
            if owner is None:
                parts.append(body)
            else:
                parts.append(span(self.tokens, owner, body, self.extra(owner) if self.extra else "",
                                  stop=not self.stopped))
                self.stopped = True
            i = j
        return "".join(parts)


def _rule(fn: Callable[[Any, _Colourer], str]):
    def rule(self, tokens, idx, options, env):
        return fn(tokens[idx], env["colour"])
    return rule


def _fence(tok, colour: _Colourer) -> str:
    lang = _LANG.sub("", (tok.info or "").split(" ")[0])[:32]
    cls = f' class="language-{lang}"' if lang else ""
    return f"<pre><code{cls}>{colour.html(tok.content)}</code></pre>\n"


def _link_open(self, tokens, idx, options, env):
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    tokens[idx].attrSet("target", "_blank")
    return self.renderToken(tokens, idx, options, env)


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"]).disable("image")  # no remote images in an offline app
    for name, rule in {
        "text": lambda tok, c: c.html(tok.content),
        "code_inline": lambda tok, c: f"<code>{c.html(tok.content)}</code>",
        "code_block": lambda tok, c: f"<pre><code>{c.html(tok.content)}</code></pre>\n",
        "fence": _fence,
        "softbreak": lambda tok, c: c.html("\n"),
        "hardbreak": lambda tok, c: "<br />" + c.html("\n"),
    }.items():
        md.add_render_rule(name, _rule(rule))
    md.add_render_rule("link_open", _link_open)
    return md


_MD = _markdown()
CURSOR = '<span class="tdm-cursor">▍</span>'


def render(tokens: Sequence[dict], cursor: bool = False, extra: Optional[Callable[[int], str]] = None) -> str:
    """The reply's Markdown as HTML with each token's text in a span of its kind (escaped throughout);
    ``extra(i)``: more attributes for the spans of token i."""
    out = _MD.render("".join(t["t"] for t in tokens), {"colour": _Colourer(tokens, extra)})
    if cursor:
        out = out.rstrip()
        for close in ("</p>", "</code></pre>", "</li>\n</ul>", "</li>\n</ol>"):
            if out.endswith(close):
                return out[:-len(close)] + CURSOR + close
        out += CURSOR
    return out


def spans_html(tokens: Sequence[dict], cursor: bool = False, empty: str = "") -> str:
    """Tokens as coloured spans in a monospace box, without Markdown (the token text exactly as generated)."""
    if tokens:
        shown = [i for i, t in enumerate(tokens) if t["t"]]
        body = "".join(span(tokens, i, esc(tokens[i]["t"]), stop=i == shown[0]) for i in shown)
    else:
        body = f'<span class="tdm-empty">{esc(empty)}</span>' if empty else ""
    return f'<div class="tdm-tokens">{body}{CURSOR if cursor else ""}</div>'


def markdown_box(tokens: Sequence[dict], cursor: bool = False, empty: str = "",
                 extra: Optional[Callable[[int], str]] = None) -> str:
    """Tokens rendered as Markdown and coloured, in a scrolling box (Compare's sides and replay lanes)."""
    if tokens:
        body = render(tokens, cursor=cursor, extra=extra)
    else:
        body = (f'<span class="tdm-empty">{esc(empty)}</span>' if empty else "") + (CURSOR if cursor else "")
    return f'<div class="tdm-tokens tdm-md">{body}</div>'


def message_html(msg: dict) -> str:
    """One chat message. A user's text is shown as typed (escaped, never Markdown); a reply as Markdown,
    coloured by token when it has ``tokens``, with its ``line`` (counts, speed, time saved) under it."""
    if msg["role"] == "user":
        queued = " tdm-queued" if msg.get("queued") else ""
        notes = ["continued as raw text (Completion mode: no chat template)"] * (msg.get("mode") == COMPLETION)
        if msg.get("waits"):  # what the message waits for: a reply above, a sweep, a pair load, another client
            notes.append(msg["waits"])
        elif queued:
            notes.append("queued: sent when the reply above finishes")
        note = "".join(f'<div class="tdm-replyline">{esc(n)}</div>' for n in notes)
        return (f'<div class="tdm-msg tdm-msg-user{queued}"><div class="tdm-bubble tdm-plaintext">'
                f'{esc(msg["content"])}</div>{note}</div>')
    if msg.get("html"):
        body = msg["html"]
    elif msg.get("tokens"):
        body = render(msg["tokens"], cursor=bool(msg.get("streaming")))
    else:
        body = _MD.render(msg.get("content", ""), {"colour": _Colourer([])}) or CURSOR * bool(msg.get("streaming"))
    line = f'<div class="tdm-replyline">{esc(msg["line"])}</div>' if msg.get("line") else ""
    if msg.get("interrupted"):
        n = len(msg.get("tokens") or [])
        line += (f'<div class="tdm-replyline tdm-interrupted" role="note"><b>⚠ Interrupted</b>: the page was '
                 f'reloaded while this reply was streaming ({n} token{"s" * (n != 1)} kept). Continue carries on '
                 f'from here; Regenerate asks again.</div>')
    return f'<div class="tdm-msg tdm-msg-bot"><div class="tdm-bubble tdm-md">{body}</div>{line}</div>'


def conversation_html(messages: Sequence[dict], empty: str = "") -> str:
    """The whole conversation (system messages are not shown)."""
    shown = [message_html(m) for m in messages if m["role"] != "system"]
    if not shown:
        return f'<div class="tdm-conv"><div class="tdm-conv-empty">{esc(empty)}</div></div>'
    return f'<div class="tdm-conv">{"".join(shown)}</div>'
