"""What a target pass costs by size: the fitted line, with the shape measured for each size where passes of
that size were seen (``verifycost.py``), and the draft-length controller learning it from its own passes."""

from __future__ import annotations

import pytest

from app.engine.control.draftlen import DraftLength
from app.engine.control.verifycost import SIZE_MIN, SizeShapes, VerifyCost


def test_the_line_alone_where_no_size_was_measured():
    tv = VerifyCost.of(0.018, 0.002, {})
    assert tv == VerifyCost(0.018, 0.002)
    assert tv(1) == pytest.approx(0.020) and tv(9) == pytest.approx(0.036) and tv(40) == pytest.approx(0.098)


def test_measured_sizes_replace_the_line_and_the_rest_stay_between_them_and_rise():
    # an H100's shape (ms): 1 token 1.78, 2 tokens 2.89, 9 tokens 3.97, 17 tokens 10.1 — no line fits it
    a, b = 1.26, 0.52
    line = lambda n: a + b * n  # noqa: E731
    shapes = {n: t / 1.78 for n, t in ((2, 2.89), (9, 3.97), (17, 10.1))}
    tv = VerifyCost.of(a, b, shapes)
    assert [tv(n) for n in (1, 2, 9, 17)] == pytest.approx([1.78, 2.89, 3.97, 10.1])
    assert all(tv(n) <= tv(n + 1) for n in range(1, 17))  # a longer pass never costs less
    # between its measured neighbours: the line where it lies between them, else the nearer bound
    assert tv(3) == pytest.approx(2.89) and tv(5) == pytest.approx(line(5)) and tv(8) == pytest.approx(3.97)
    assert tv(12) == pytest.approx(line(12))
    assert tv(18) >= tv(17)  # beyond the table: the line, never below its last entry
    # a measured size below a smaller measured one (noise) does not make the longer pass cheaper
    shapes[9] = 2.0 / 1.78
    assert VerifyCost.of(a, b, shapes)(9) == pytest.approx(2.89)


def test_a_size_speaks_only_after_a_few_passes_and_one_hiccup_does_not_move_it():
    sizes = SizeShapes(17)
    sizes.add(3, 1.2)
    sizes.add(3, 1.2)
    assert 3 not in sizes.medians()  # too few passes of 3 tokens yet
    for _ in range(SIZE_MIN - 2):
        sizes.add(3, 1.2)
    sizes.add(3, 3.0)  # a page fault
    assert sizes.medians()[3] == pytest.approx(1.2)
    sizes.add(40, 1.0)  # a pass longer than the controller drafts: ignored
    sizes.add(1, 2.0)  # a plain pass's shape is 1 by definition
    assert list(sizes.medians()) == [3]
    sizes.count(10**9)  # (nothing is held for a size never seen: a huge limit costs nothing)
    assert sizes.weights() == {}


def feed(length: DraftLength, cost, steps: int, slow=lambda step: 1.0) -> None:
    """Passes of 1, 2 and 17 tokens in turn (a plain step, a short lookup, a full draft), ``cost(n)`` seconds
    each times ``slow(step)``."""
    for step in range(steps):
        n = (0, 1, 16)[step % 3] if length.measured() else length.k
        length.update(n, n, 0.007 * n, cost(n + 1) * slow(step))


def test_the_controller_learns_what_a_short_pass_costs_on_this_cpu():
    """On this CPU a plain step is a matrix-vector product, about 2 ms under the line through the batched passes
    (the demo pair: 19.9 ms for 1 token, 23.9 for 2, then about 2.15 ms a token). Fed those times, the
    controller prices a 2-token pass at what it costs, where its line alone said less."""
    cost = lambda n: 0.0199 if n == 1 else 0.0196 + 0.00215 * n  # noqa: E731
    length = DraftLength("auto", 16)
    feed(length, cost, 60)
    tv = length.verify()
    assert tv(1) == pytest.approx(0.0199, rel=0.03) and tv(17) == pytest.approx(cost(17), rel=0.03)
    assert tv(2) == pytest.approx(cost(2), rel=0.03)
    a, b = length.verify_line()
    assert a + 2 * b < cost(2) * 0.97  # what the line alone would have said


def test_a_slow_spell_moves_the_level_not_the_shape():
    """Another program takes the cores for 20 passes (every pass 3x slower): each size's shape is measured
    against a plain pass near it, which the spell slowed as much, so a 2-token pass still costs what it did
    against a plain one."""
    cost = lambda n: 0.0199 if n == 1 else 0.0196 + 0.00215 * n  # noqa: E731
    length = DraftLength("auto", 16)
    feed(length, cost, 60)
    before = length.verify()
    feed(length, cost, 20, slow=lambda step: 3.0)
    after = length.verify()
    assert after(2) / after(1) == pytest.approx(before(2) / before(1), rel=0.03)
