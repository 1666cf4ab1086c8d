"""The FIM suite's cursor positions: cut from the code in app/lab/data/fim at line boundaries, the same every run."""

from __future__ import annotations

from app.lab import fimsuite
from app.lab.prompts import FIM, builtin_suite, load_prompts

TEXT = "".join(f"line {i}\n" if i % 5 else "\n" for i in range(40))


def test_a_cut_leaves_the_cursor_on_an_empty_line_where_the_lines_were():
    lines = TEXT.splitlines(keepends=True)
    c = fimsuite.cut(lines, 12, 2)
    assert c.line == 13 and c.middle == "line 12\nline 13"
    assert c.prefix.endswith("line 11\n") and c.suffix.startswith("\nline 14\n")
    # the editor's text is the prefix, the empty cursor line's end and the rest; the middle fills the line
    assert c.prefix + c.middle + c.suffix == "".join(lines[12 - len(c.prefix.splitlines()):12 + 2 + 16])
    assert len(c.suffix.splitlines()) == 1 + fimsuite.SUFFIX_LINES


def test_the_window_is_bounded_and_a_line_stays_below_the_cursor():
    lines = TEXT.splitlines(keepends=True)
    c = fimsuite.cut(lines, 38, 3)  # the last line but one: only one line can go
    assert c.middle == "line 38" and c.suffix == "\nline 39\n"
    assert len(c.prefix.splitlines()) == fimsuite.PREFIX_LINES


def test_positions_are_spread_over_non_blank_lines_and_fixed():
    lines = TEXT.splitlines(keepends=True)
    at = fimsuite.positions(lines, 3)
    assert at == fimsuite.positions(lines, 3) and at == sorted(at) and len(set(at)) == 3
    assert all(lines[i].strip() and fimsuite.MIN_PREFIX <= i < len(lines) - 1 for i in at)
    assert [c.middle.count("\n") + 1 for c in fimsuite.cuts(TEXT, 3)] == [1, 2, 3]


def test_the_builtin_suite_holds_twelve_requests_in_three_languages():
    suite = load_prompts(None, FIM)
    assert len(suite) == 12 and len({p.id for p in suite}) == 12
    assert {s.language for s in fimsuite.SOURCES} == {"Python", "JavaScript", "C"}
    assert all(p.category == FIM and p.infill is not None and p.expected for p in suite)
    assert all(p.infill.prefix.endswith("\n") and p.infill.suffix.startswith("\n") for p in suite if p.infill)
    assert [p.id for p in suite] == [p.id for p in load_prompts(None, FIM)]  # deterministic
    assert FIM not in {p.category for p in builtin_suite("all")}  # "all" stays what every pair can run
