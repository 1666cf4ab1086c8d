"""A chat conversation kept in the browser (``gr.BrowserState``: the page's local storage), so a reload keeps it
until **New chat**.

What is stored is data, not HTML: each message's role and text, a reply's tokens (text, kind, target pass, draft
position, draft probability, the draft's own token where the target corrected it) and its line of counts, a
message's mode where it was a completion prompt, and a reply's ``interrupted`` mark: while a reply streams, the
question and the reply so far are stored with that mark, so a reload mid-reply shows them as interrupted.
Restoring renders the HTML again from them, escaped as always, and drops whatever does not have that shape: the
storage is the user's own, but it is still input.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Optional

from app import paths
from app.engine.events import KINDS
from app.service.chat import ChatMode
from app.ui import reply

STORAGE_KEY = "tandem-chat"
MAX_MESSAGES = 400  # the newest are kept
MAX_LINE = 400  # characters of a reply's line of counts


def secret() -> str:
    """The key the browser's copy is scrambled with: one per data directory, so a conversation also survives a
    restart of the app (Gradio would pick a new random one at every start). An empty or damaged key file is
    replaced; the key is written whole or not at all (a full disk never leaves an empty file)."""
    path = paths.home() / "ui-state-key"
    try:
        text = path.read_text(encoding="utf-8").strip()
        if _KEY.fullmatch(text):
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = secrets.token_hex(16)
    try:
        paths.write_text_atomic(path, text)
    except OSError:  # a read-only or full data directory: the conversation is kept until the app restarts
        pass
    return text


_KEY = re.compile(r"[\x21-\x7e]{16,256}")  # printable, no spaces: what secret() writes is 32 hex digits


def saved(history: list[dict]) -> list[dict]:
    """The conversation as the browser keeps it."""
    out = []
    for m in history[-MAX_MESSAGES:]:
        item = {"role": m["role"], "content": m["content"]}
        for name in ("tokens", "line", "mode", "interrupted"):
            if m.get(name):
                item[name] = m[name]
        out.append(item)
    return out


def restored(data: Any) -> list[dict]:
    """The conversation from the browser's copy: messages the chat can show and send again (bad items dropped)."""
    if not isinstance(data, list):
        return []
    out = []
    for m in data[-MAX_MESSAGES:]:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") \
                or not isinstance(m.get("content"), str):
            continue
        msg: dict = {"role": m["role"], "content": m["content"]}
        if m["role"] == "user" and m.get("mode") == ChatMode.COMPLETION:
            msg["mode"] = ChatMode.COMPLETION
        if m["role"] == "assistant":
            if m.get("interrupted") is True:
                msg["interrupted"] = True
            toks = _tokens(m.get("tokens"))
            if toks and "".join(t["t"] for t in toks) == m["content"]:
                msg["tokens"], msg["html"] = toks, reply.render(toks)
            if isinstance(m.get("line"), str):
                msg["line"] = m["line"][:MAX_LINE]
        out.append(msg)
    return out


def _tokens(items: Any) -> Optional[list[dict]]:
    if not isinstance(items, list):
        return None
    out = []
    for t in items:
        if not (isinstance(t, dict) and isinstance(t.get("t"), str) and t.get("k") in KINDS
                and _int(t.get("s")) and (t.get("p") is None or _int(t.get("p")))
                and (t.get("q") is None or isinstance(t.get("q"), (int, float)))):
            return None
        tok = {"t": t["t"], "k": t["k"], "s": t["s"], "p": t.get("p"), "q": t.get("q")}
        if isinstance(t.get("d"), str):
            tok["d"] = t["d"]
        out.append(tok)
    return out


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
