"""Stop strings over generated text: the first one's place and the end that could still become one."""

from __future__ import annotations

from app.engine.decoding.stops import find_stop, held_back


def test_the_earliest_stop_string_is_found_from_start():
    assert find_stop("a STOP b STOP", ["STOP"]) == 2
    assert find_stop("a STOP b STOP", ["STOP"], start=3) == 9
    assert find_stop("a b END", ["END", "b"]) == 2
    assert find_stop("abc", ["x", ""]) is None


def test_a_possible_start_of_a_stop_string_is_held_back():
    assert held_back("hello wor", ["world"]) == 3
    assert held_back("hello", ["xyz"]) == 0
    assert held_back("abc</", ["</s>", "\n\n"]) == 2
    assert held_back("abc\n", ["</s>", "\n\n"]) == 1
