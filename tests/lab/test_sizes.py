"""The size sweep's pure parts: the recommendation from measured-looking rows, the sizes a person types, and the
plan of each size (memory and disk checked before anything is written) on the real SmolLM2 headers."""

from __future__ import annotations

import pytest

from app.lab import sizereport
from app.lab.sizereport import PAYS, recommend
from app.lab.sizes import SizeError, parse_factors, plan, standin_file
from app.models.catalog import load as load_catalog
from app.models.fit import GIB, Device, Machine


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


@pytest.mark.parametrize("text, factors", [("1,2,4", (1, 2, 4)), ("x4, x2,1,4", (1, 2, 4)), ("8", (8,))])
def test_sizes_as_typed(text, factors):
    assert parse_factors(text) == factors


@pytest.mark.parametrize("text, says", [("", "at least one size"), ("0", "not a size"), ("1.5", "not a size"),
                                        ("65", "not a size"), ("two", "not a size"),
                                        (",".join(map(str, range(1, 11))), "at most 8")])
def test_sizes_that_are_not_sizes_are_refused_by_name(text, says):
    with pytest.raises(SizeError, match=says):
        parse_factors(text)


def machine(ram_gib: float, gpu_gib: float = 0.0) -> Machine:
    gpus = (Device("GPU", int(gpu_gib * GIB), int(gpu_gib * GIB)),) if gpu_gib else ()
    return Machine(cpu_cores=2, ram_total=int(ram_gib * GIB), ram_available=int(ram_gib * GIB), gpus=gpus)


def test_the_plan_checks_memory_then_disk_before_writing(smol_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))  # nothing derived there: every stand-in is still to make
    source, draft = smol_paths
    plans = plan(source, draft, (1, 2, 4, 8), machine(22), disk_free=100 * 10**9)
    by = {p.factor: p for p in plans}
    assert by[1].present and by[1].file == str(source) and by[1].skip is None and by[1].derive_bytes == 0
    assert [by[f].ftype for f in (2, 4, 8)] == ["F32", "F32", "F16"]  # x8 F32 needs about 26 GiB: F16
    assert "at F32 it would need 26." in by[8].note and by[8].skip is None
    assert by[2].label == "x2 F32 (481M)" and by[4].params > 1.8e9 and by[8].params > 7.0e9
    assert not by[2].present and by[2].derive_bytes == by[2].file_bytes
    assert by[2].catalog_model == "smollm2-135m-instruct-standin-x2"  # the catalog's own file: reused by setup
    assert standin_file(source, 2, "F32").name == load_catalog().models[by[2].catalog_model].file
    assert by[8].catalog_model is None  # no F16 entry: derived directly
    assert "about 26." not in by[8].line() and "to derive" in by[8].line()

    forced = {p.factor: p for p in plan(source, draft, (4, 8), machine(22), disk_free=100 * 10**9, ftype="F32")}
    assert forced[4].skip is None
    assert forced[8].skip.startswith("needs about 26.") and "22.0 GiB of RAM is available here" in forced[8].skip

    # 9 GB free: x2 (1.9 GB) fits, then x4 (7.3 GB) does not beside it and the 1 GiB kept spare
    tight = {p.factor: p for p in plan(source, draft, (1, 2, 4), machine(22), disk_free=9 * 10**9)}
    assert tight[2].skip is None
    assert tight[4].skip == "deriving it writes 7.25 GB and 7.07 GB is free (keeping 1 GiB spare)"

    gpu = {p.factor: p for p in plan(source, draft, (8,), machine(8, gpu_gib=30), disk_free=100 * 10**9)}
    assert gpu[8].ftype == "F32" and gpu[8].skip is None  # RAM and the GPU's memory together hold it
