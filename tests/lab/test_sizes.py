"""The size sweep's plan (``lab/sizes.py``): the sizes a person types, and what each size is and needs (memory and
disk checked before anything is written), on the real SmolLM2 headers."""

from __future__ import annotations

import pytest

from app.lab.sizes import SizeError, parse_factors, plan, standin_file
from app.models.catalog import load as load_catalog
from app.models.fit import GIB, Device, Machine


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
