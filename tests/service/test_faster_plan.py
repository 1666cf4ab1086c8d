""""Make it faster" says what it will do and about how long before it starts: the quick sweep's runs, from the
lab's own plan, and an estimate from a figure measured here, labelled as one (the real demo pair)."""

from __future__ import annotations

import re

from app.lab import baselines
from app.service.faster import faster_plan
from app.service.state import AppState


def test_the_plan_names_the_runs_and_an_estimate_from_the_measured_plain_speed(smol_pair, smol_paths, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))  # no stored speeds or sweeps: a data folder of its own
    state = AppState(pair=smol_pair, pair_id="demo-smollm2", target_path=str(smol_paths[0]),
                     draft_path=str(smol_paths[1]))
    first = faster_plan(state)
    assert re.search(r"run a quick sweep: \d+ runs", first), first
    assert "time not estimated yet" in first and "≈" not in first  # nothing measured: no number made up
    baselines.save(state.baseline_key(), 40.0, 64, smol_paths[0].name, "cpu")
    plan = faster_plan(state)
    runs = int(re.search(r"quick sweep: (\d+) runs", plan).group(1))
    found = re.search(r"How long: ≈ (\d+) s \(estimate: (\d+) runs × (\d+) tokens at the plain speed measured "
                      r"here \(40.0 tok/s\)\)", plan)
    assert found, plan
    assert int(found.group(2)) == runs and abs(int(found.group(1)) - runs * int(found.group(3)) / 40.0) <= 1
    assert "Stop ends it early" in plan
