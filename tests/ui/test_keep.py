"""The conversation kept in the browser: saved as data, restored as escaped HTML, and whatever does not have
the saved shape is dropped (no browser, no model)."""

from __future__ import annotations

from app.ui import keep

EVIL = '<img src=x onerror=alert(1)>'


def reply_tokens(text_parts):
    return [{"t": t, "k": "accepted", "s": i, "p": 0, "q": 0.9} for i, t in enumerate(text_parts)]


def test_a_saved_conversation_comes_back_rendered_again_and_escaped():
    toks = reply_tokens(["Hello", " ", EVIL])
    history = [{"role": "user", "content": EVIL},
               {"role": "assistant", "content": "Hello " + EVIL, "html": "<b>ignored</b>", "tokens": toks,
                "line": "draft (K 4): 3 of 3 accepted"}]
    saved = keep.saved(history)
    assert "html" not in saved[1]  # data, not HTML
    back = keep.restored(saved)
    assert [m["content"] for m in back] == [EVIL, "Hello " + EVIL]
    assert "<img" not in back[1]["html"] and "&lt;img" in back[1]["html"] and "tdm-accepted" in back[1]["html"]
    assert back[1]["line"] == "draft (K 4): 3 of 3 accepted"


def test_whatever_does_not_have_the_saved_shape_is_dropped():
    assert keep.restored("not a list") == [] and keep.restored(None) == []
    bad = [{"role": "system", "content": "x"}, {"role": "user", "content": 3}, "text", None,
           {"role": "assistant", "content": "hi", "tokens": [{"t": "hi", "k": "evil", "s": 0}], "html": EVIL},
           {"role": "assistant", "content": "other", "tokens": reply_tokens(["hi"])}]
    back = keep.restored(bad)
    assert back == [{"role": "assistant", "content": "hi"}, {"role": "assistant", "content": "other"}]
