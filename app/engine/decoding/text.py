"""Text in and out: the GGUF's own chat template, and UTF-8 that streams whole characters."""

from __future__ import annotations

import atexit
import codecs
import re
from typing import Optional, Sequence

from app.engine import limits
from app.engine.decoding.templatebox import SECONDS_ENV, TemplateBox, TemplateError

TEMPLATE_SECONDS = 10.0  # a chat template's render, at most (an ordinary one takes milliseconds)
TEMPLATE_CHARS = 2 * limits.PROMPT_CHARS  # characters a chat template may render: a full chat and as much again

_BOX = TemplateBox()  # the child process that renders chat templates (templatebox.py), started when first used
atexit.register(_BOX.close)


def render_chat(template: Optional[str], messages: Sequence[dict], bos: str = "", eos: str = "",
                add_generation_prompt: bool = True, tools: Optional[Sequence[dict]] = None) -> str:
    """Render ``messages`` ([{"role", "content"}]) with the model's Jinja chat template (sandboxed, in a child
    process, within TEMPLATE_SECONDS or ``TANDEM_TEMPLATE_SECONDS`` and TEMPLATE_CHARS: ``templatebox.py``).

    Models without a template get a plain "Role: text" transcript, which base models continue sensibly.
    ``tools`` (OpenAI function tools) are handed to templates that know them (toolcalls.py decides).
    """
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise TemplateError("each message needs a 'role' and a 'content'")
    if not template:
        lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
        return "\n".join(lines) + ("\nAssistant:" if add_generation_prompt else "")
    seconds = limits.env_number(SECONDS_ENV, TEMPLATE_SECONDS, "template_seconds")
    variables = dict(messages=list(messages), bos_token=bos, eos_token=eos,
                     add_generation_prompt=add_generation_prompt, **({"tools": list(tools)} if tools else {}))
    return _BOX.render(template, variables, seconds, TEMPLATE_CHARS)


class Utf8Stream:
    """Turns token byte pieces into text, holding back a character split across tokens until it is whole. Bytes
    that can begin no character are U+FFFD at once; only the start of a character is ever held back."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> None:
        """The end of the text: a character still held back was cut (``max_tokens``, a stop, a full context) and
        is dropped, so a reply ends in whole characters and never in U+FFFD (half a character)."""
        self._decoder.reset()


_MARK = re.compile("\ue000(\\d+)\ue001")


def message_pieces(template: Optional[str], messages: Sequence[dict], rendered: str, bos: str = "",
                   eos: str = "", tools: Optional[Sequence[dict]] = None) -> Optional[list[tuple[str, bool]]]:
    """``rendered`` (the template's output for ``messages``) cut into (text, is_message) pieces: the message
    texts, which are the users' words, and the template's own text around them, whose markers are special.

    Found by rendering again with a private-use marker in place of each message's text; None when the template
    changes the texts it is given (then where they sit is unknown)."""
    try:
        marked = render_chat(template, [dict(m, content=f"\ue000{i}\ue001") for i, m in enumerate(messages)],
                             bos=bos, eos=eos, tools=tools)
    except TemplateError:
        return None
    for adjust in (lambda s: s, str.strip):  # templates that trim the message text
        pieces, pos = [], 0
        for found in _MARK.finditer(marked):
            if int(found.group(1)) >= len(messages):
                return None
            pieces.append((marked[pos:found.start()], False))
            pieces.append((adjust(str(messages[int(found.group(1))]["content"])), True))
            pos = found.end()
        pieces.append((marked[pos:], False))
        pieces = [(text, is_msg) for text, is_msg in pieces if text]
        if "".join(text for text, _ in pieces) == rendered:
            return pieces
    return None
