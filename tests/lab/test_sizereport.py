"""The size sweep's recommendation (``lab/sizereport.py``) on measured-looking rows: where the speedup crosses
the threshold, said in one line, and the sizes as the history's cells."""

from __future__ import annotations

import pytest

from app.lab import sizereport
from app.lab.sizereport import PAYS, recommend


def row(factor: int, params: float, speedup: float) -> dict:
    return {"factor": factor, "label": f"x{factor} F32", "params": params, "speedup": speedup}


def test_the_crossing_is_interpolated_in_log_parameters():
    rec = recommend([row(1, 135e6, 0.92), row(2, 481e6, 1.05), row(4, 1.81e9, 1.60), row(8, 7.0e9, 2.4)])
    assert rec["kind"] == "crossing"
    # 1.1x lies a tenth of the way from x2 (1.05x) to x4 (1.60x), in log parameters
    assert 481e6 < rec["params"] < 1.81e9
    assert rec["params"] == pytest.approx(481e6 * (1.81e9 / 481e6) ** (0.05 / 0.55), rel=1e-6)
    assert rec["line"].startswith(f"On this machine a draft pays (at least {PAYS:.1f}x) for targets above ~")
    assert "x2 (481M) ran at 1.05x, x4 (1.8B) at 1.60x" in rec["line"]


def test_a_size_that_pays_between_two_that_do_not_is_not_the_crossing():
    # x2 paid by a fluke, x4 did not: only from x8 up does every size pay
    rec = recommend([row(1, 135e6, 0.95), row(2, 481e6, 1.2), row(4, 1.81e9, 1.05), row(8, 7.0e9, 1.9)])
    assert rec["kind"] == "crossing" and 1.81e9 < rec["params"] < 7.0e9


def test_when_every_size_pays_or_none_does_it_says_so():
    every = recommend([row(2, 481e6, 1.7), row(1, 135e6, 1.3)])  # any order
    assert every["kind"] == "all" and every["params"] == 135e6
    assert "pays at every size measured, from 135M parameters (1.30x) to 481M (1.70x)" in every["line"]
    none = recommend([row(1, 135e6, 0.97), row(2, 481e6, 1.02)])
    assert none["kind"] == "none" and none["params"] is None
    assert "no size measured pays" in none["line"] and "largest, x2 (481M), ran at 1.02x" in none["line"]
    nothing = recommend([{"factor": 2, "label": "x2", "params": 481e6, "speedup": None}])
    assert nothing["kind"] == "nothing" and "Nothing measured" in nothing["line"]


def test_the_history_cells_and_best_name_the_size():
    rows = [dict(row(1, 135e6, 1.2), label="x1 F32 (135M)", speedup_min=1.1, speedup_max=1.3, acceptance_rate=0.8,
                 mean_accepted=3.0, c=0.3, v=1.2, bound=1.5, spec_tps=30.0, prompts=2),
            dict(row(2, 481e6, 1.7), label="x2 F32 (481M)", speedup_min=1.6, speedup_max=1.8, acceptance_rate=0.8,
                 mean_accepted=3.0, c=0.1, v=1.1, bound=1.9, spec_tps=9.0, prompts=2)]
    cells = sizereport.cells(rows, 4)
    assert [c["draft"] for c in cells] == ["target x1 F32 (135M)", "target x2 F32 (481M)"]
    assert all(c["k"] == 4 and c["p_min"] is None for c in cells)
    best = sizereport.best(rows, 4)
    assert best["draft"] == "target x2 F32 (481M)" and best["beats_plain"]
