"""llama.cpp's end rules for /infill (n_indent, t_max_predict_ms, stop strings) and the suffix rule, token by token."""

from __future__ import annotations

from app.engine.decoding.infillcut import InfillCut, Rules, StopType, SuffixStop


def run(pieces, rules: Rules, times=None, eog: bool = False) -> InfillCut:
    cut = InfillCut(rules)
    for i, piece in enumerate(pieces):
        if not cut.feed(piece, None if times is None else times[i]):
            break
    else:
        cut.finish(eog)
    return cut


def test_n_indent_cuts_the_first_shallower_line_after_its_indentation():
    pieces = ["    x = 1", "\n", "    y", " = 2", "\n", "print", "(", "y)"]
    cut = run(pieces, Rules(n_indent=4))
    assert cut.text == "    x = 1\n    y = 2\n" and cut.stop == StopType.LIMIT and cut.tokens == 6
    assert run(pieces, Rules(n_indent=0)).text == "".join(pieces)


def test_n_indent_never_checks_the_cursor_line_and_keeps_a_short_lines_indentation():
    cut = run(["x", "\n", "  ", "y", "\n", "z"], Rules(n_indent=4))
    assert cut.text == "x\n  " and cut.stop == StopType.LIMIT


def test_an_end_of_generation_is_read_as_one_more_token():
    """llama.cpp runs its rules on the end-of-generation token too: a shallow last line is cut then."""
    cut = run(["  a", "\n", "b"], Rules(n_indent=2), eog=True)
    assert cut.text == "  a\n" and cut.stop == StopType.LIMIT
    cut = run(["  a", "\n", "  b"], Rules(n_indent=2), eog=True)
    assert cut.text == "  a\n  b" and cut.stop == StopType.EOS


def test_t_max_predict_ms_ends_at_a_newline_once_the_time_is_spent():
    pieces = ["a", "\n", "b", "\n", "c"]
    cut = run(pieces, Rules(t_max_predict_ms=100), times=[10, 50, 120, 150, 160])
    assert cut.text == "a\nb\n" and cut.stop == StopType.LIMIT and cut.tokens == 4
    assert run(pieces, Rules(t_max_predict_ms=0), times=[10, 50, 120, 150, 160]).text == "a\nb\nc"


def test_stop_strings_cut_before_the_word_and_hold_back_a_possible_start():
    cut = InfillCut(Rules(stops=["END"]))
    cut.feed("abc E")
    assert cut.releasable(False) == "abc "
    cut.feed("ND more")
    assert cut.text == "abc " and cut.stop == StopType.WORD and cut.stopping_word == "END"


def test_suffix_stop_cuts_the_copy_of_what_follows_the_cursor():
    prefix = "def area(w, h):\n"
    suffix = "\n\nif __name__ == '__main__':\n    print(area(2, 3))\n"
    s = SuffixStop.of(prefix, suffix)
    assert s is not None and s.line == "if __name__ == '__main__':" and s.before == "\n\n"
    pieces = ["    return", " w * h", "\n", "\n", "\n", "if", " __name__", " == '__main__':", "\n", "    print"]
    cut = run(pieces, Rules(suffix=s))
    assert cut.text == "    return w * h\n" and cut.stop == StopType.WORD
    assert prefix + cut.text + suffix == prefix + "    return w * h\n\n\nif __name__ == '__main__':\n" \
        "    print(area(2, 3))\n"
    # fewer blank lines than the suffix has: the blank lines go, the suffix brings its own
    cut = run(["    return w * h", "\n", "\n", "if __name__ == '__main__':", "\n"], Rules(suffix=s))
    assert cut.text == "    return w * h"


def test_suffix_stop_mid_line_drops_the_copy_of_the_cursor_lines_rest():
    s = SuffixStop.of("x = foo(", "a)\ny = 2\n")
    assert s is not None and s.fragment == "a)" and s.line == "y = 2"
    assert run(["b, ", "a)", "\n", "y = 2", "\n"], Rules(suffix=s)).text == "b, "
    assert run(["b, a)", "\n", "z = 3", "\n"], Rules(suffix=s), eog=True).text == "b, a)\nz = 3\n"


def test_suffix_stop_at_the_end_of_a_generation_and_without_a_whole_line():
    s = SuffixStop.of("a = 1\n", "c = 3")
    assert s is not None and s.before == ""
    assert run(["b = 2\n", "c = 3"], Rules(suffix=s), eog=True).text == "b = 2\n"
    assert SuffixStop.of("x = f(", "1)") is None and SuffixStop.of("x\n", "\n  \n") is None


def test_nothing_a_rule_may_still_cut_is_released():
    s = SuffixStop.of("def f():\n", "\nprint(f())\n")
    cut = InfillCut(Rules(suffix=s))
    cut.feed("    return 1")
    assert cut.releasable(False) == "    return 1"  # it cannot be the suffix's line
    cut.feed("\n")
    cut.feed("pri")
    assert cut.releasable(False) == "    return 1"  # the newline and "pri" may be the suffix's copy
    cut.feed("nt(f())")
    cut.feed("\n")
    assert cut.ended and cut.text == "    return 1" and cut.releasable(False) == "    return 1"

    cut = InfillCut(Rules(n_indent=4))
    for piece in ("    a", "\n", "  "):
        cut.feed(piece)
    assert cut.releasable(False) == "    a\n"  # the new line's indentation is not known yet
    cut.feed("  b")
    assert cut.releasable(False) == "    a\n    b"
