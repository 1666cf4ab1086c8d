"""The marks a kept conversation carries beside its text: a completion prompt's mode and an interrupted reply
(a reload mid-reply). Stored browser state is input: a mark of any other shape is dropped, never trusted."""

from __future__ import annotations

from app.ui import keep, reply

EVIL = '<img src=x onerror=alert(1)>'


def test_a_reply_cut_by_a_reload_comes_back_marked_interrupted_with_its_tokens():
    toks = [{"t": "Once", "k": "accepted", "s": 0, "p": 0, "q": 0.9}, {"t": " upon", "k": "plain", "s": 1}]
    saved = keep.saved([{"role": "user", "content": "Tell a story.", "mode": "completion"},
                        {"role": "assistant", "content": "Once upon", "tokens": toks, "interrupted": True}])
    assert saved[0]["mode"] == "completion" and saved[1]["interrupted"] is True
    back = keep.restored(saved)
    assert back[0]["mode"] == "completion"
    assert back[1]["interrupted"] is True and len(back[1]["tokens"]) == 2
    html = reply.message_html(back[1])
    assert "Interrupted" in html and "2 tokens kept" in html and "tdm-interrupted" in html
    assert "continued as raw text" in reply.message_html(back[0])


def test_a_question_whose_reply_had_not_begun_comes_back_with_an_empty_interrupted_reply():
    back = keep.restored([{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "", "tokens": [], "interrupted": True}])
    assert back[1] == {"role": "assistant", "content": "", "interrupted": True}
    assert "0 tokens kept" in reply.message_html(back[1])


def test_marks_of_another_shape_are_dropped():
    back = keep.restored([{"role": "user", "content": "a", "mode": EVIL},
                          {"role": "user", "content": "b", "mode": ["completion"]},
                          {"role": "assistant", "content": "c", "interrupted": "yes"},
                          {"role": "assistant", "content": "d", "interrupted": 1},
                          {"role": "user", "content": "e", "interrupted": True}])
    assert back == [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                    {"role": "assistant", "content": "c"}, {"role": "assistant", "content": "d"},
                    {"role": "user", "content": "e"}]


def test_a_waiting_message_names_what_it_waits_for():
    html = reply.message_html({"role": "user", "content": "Hi", "queued": True,
                               "waits": "waiting for Make it faster's quick sweep (run 3 of 48, about 40 s left)"})
    assert "quick sweep (run 3 of 48, about 40 s left)" in html and "reply above" not in html
    assert "reply above finishes" in reply.message_html({"role": "user", "content": "Hi", "queued": True})
