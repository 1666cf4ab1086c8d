"""Continue and Regenerate on a reply cut short (a reload mid-reply), without a browser or a model: Continue
queues the question with the reply so far, its tokens kept; Regenerate asks again without calling the new
reply "the same" as the cut one."""

from __future__ import annotations

from types import SimpleNamespace

from app.service.chat import ChatMode
from app.service.chatqueue import Notes, Sessions
from app.service.state import AppState
from app.ui.tabs import chat, chatmode

REQUEST = SimpleNamespace(session_hash="s1")
CUT = [{"role": "user", "content": "Tell a story.", "mode": ChatMode.COMPLETION},
       {"role": "assistant", "content": "Once upon", "interrupted": True,
        "tokens": [{"t": "Once", "k": "accepted", "s": 0, "p": 0, "q": 0.9}, {"t": " upon", "k": "plain", "s": 1}]}]


def test_continue_queues_the_question_with_the_reply_so_far():
    sessions = Sessions()
    sessions.set_history("s1", CUT)
    shown, status = chatmode.carry_on(AppState(), sessions, REQUEST, ("v",), chat.display)
    assert "Continuing" in status and "Once" in shown
    assert sessions.history("s1") == []  # taken off; the reply loop puts it back, carried on
    claim = sessions.claim("s1")
    text, (mode, values, start) = sessions.next(claim)
    assert (text, mode, values) == ("Tell a story.", ChatMode.COMPLETION, ("v",))
    assert [t["t"] for t in start["tokens"]] == ["Once", " upon"]


def test_continue_with_nothing_to_carry_on_says_so():
    sessions = Sessions()
    _, status = chatmode.carry_on(AppState(), sessions, REQUEST, (), chat.display)
    assert "Nothing to continue" in status and sessions.queued("s1") == []


def test_regenerate_of_a_cut_reply_asks_again_without_calling_it_the_same():
    sessions, notes = Sessions(), Notes()
    sessions.set_history("s1", CUT)
    chat.regenerate(AppState(), sessions, notes, REQUEST, "v")
    assert "s1" not in notes.replaced
    assert sessions.queued("s1") == ["Tell a story."]
