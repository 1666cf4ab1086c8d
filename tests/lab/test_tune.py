"""Pair lab: the sweep on the real demo pair, its artifacts, history (incl. restart and cancel), tuned settings,
and the ``tune`` command line. Tiny sweeps (two K values, two prompts, 16 tokens); no timed asserts."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import pytest

from app.lab.prompts import builtin_suite
from app.lab import ranking, tune
from app.lab.history import History
from app.lab.lab import LabRequest, plan, run_lab
from app.engine.stats import leviathan_bound
from app.engine.summary import Summary
from app.lab.tuned import load_tuned

CELL_KEYS = {"draft", "k", "speedup", "acceptance_rate", "mean_accepted", "c", "v", "bound", "per_position",
             "tps", "speedup_min", "speedup_max", "prompts"}


@pytest.fixture
def home(tmp_path, monkeypatch, smol_paths):
    """A fresh TANDEM_HOME that still sees the demo models (symlinked), so nothing is fetched again."""
    (tmp_path / "models").symlink_to(Path(smol_paths[0]).parent, target_is_directory=True)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    return tmp_path


def _draft_id(smol_paths) -> str:
    return Path(smol_paths[1]).stem


# --- pure parts -----------------------------------------------------------------------------------------

def test_parse_ks():
    assert tune.parse_ks("1,2,4,8") == [1, 2, 4, 8]
    assert tune.parse_ks("1-4,8,auto") == [1, 2, 3, 4, 8, "auto"]
    assert tune.parse_ks("4,2,2") == [2, 4]
    for bad in ("", "0", "3-1", "x"):
        with pytest.raises(ValueError):
            tune.parse_ks(bad)


def test_cell_math_and_best():
    run = Summary(drafted=8, accepted=6, rejections=2, spec_steps=2, steps=3, tokens=9, t_draft=0.08,
                  t_verify_spec=0.3, tested_at=[2, 2, 2, 2], accepted_at=[2, 2, 1, 1], tokens_per_s=30.0)
    s = tune.pool([run, run])
    assert s.acceptance_rate == pytest.approx(0.75) and s.alpha == pytest.approx(0.75)
    assert s.per_position == [1.0, 1.0, 0.5, 0.5]
    c, v, bound = tune.costs(s, baseline_tps=20.0)
    assert c == pytest.approx(0.01 / 0.05) and v == pytest.approx(0.15 / 0.05)
    assert bound == pytest.approx(leviathan_bound(0.75, 4.0, c, v))

    def cell(draft: str, k: int, speedups: tuple):
        entries = [tune.CellPrompt(id=cat, category=cat, speedup=x, tps=None, baseline_tps=None, acceptance_rate=0.0,
                                   mean_accepted=0.0, alpha=0.0, mean_k=0.0, c=None, v=None, bound=None, paused=None,
                                   limit=None) for cat, x in zip(("code", "chat"), speedups)]
        return tune.cell_summary(tune.Candidate(draft), k, None, entries, 2)

    cells = [cell(d, k, (s1, s2)) for d, k, s1, s2 in (("a", 2, 1.2, 1.4), ("a", 4, 1.9, 0.9), ("lookup", 2, 1.1, 1.6))]
    best = ranking.best_cell(cells)  # by the median over prompts (1.3, 1.4, 1.35), not by one prompt's best
    assert (best["draft"], best["k"], best["speedup"]) == ("a", 4, pytest.approx(1.4))
    recs = ranking.recommend(cells, ["code", "chat"])
    assert (recs["code"]["draft"], recs["code"]["k"]) == ("a", 4)
    assert (recs["chat"]["draft"], recs["chat"]["k"]) == ("lookup", 2)
    assert recs["all"]["speedup_min"] == 0.9 and recs["all"]["speedup_max"] == 1.9


# --- the sweep on the demo pair ----------------------------------------------------------------------------

def test_small_sweep_artifacts_history_and_tuned(smol_pair, smol_paths, home):
    req = LabRequest(drafts=f"{_draft_id(smol_paths)},lookup", ks="2,4", quick=True, max_tokens=16)
    cfg = plan(smol_pair, req)
    assert len(cfg.prompts) == 2 and cfg.ks == [2, 4]
    seen = []
    result = run_lab(smol_pair, cfg, "demo-smollm2", progress=lambda *a: seen.append(a))
    assert not result.partial and seen[-1][0] == seen[-1][1] == cfg.total_runs()
    assert seen[0][0] == 0 and all(eta is not None and eta >= 0 for done, *_, eta in seen if done)

    cells = result.cells
    assert {(c["draft"], c["k"]) for c in cells} == {(d, k) for d in (_draft_id(smol_paths), "lookup")
                                                     for k in (2, 4)}
    for c in cells:
        assert CELL_KEYS <= c.keys() and c["prompts"] == 2 and c["complete"]
        assert c["speedup"] > 0 and 0 <= c["acceptance_rate"] <= 1 and c["mean_accepted"] >= 1
        assert c["speedup_min"] <= c["speedup"] <= c["speedup_max"]
        assert all(0 <= p <= 1 for p in c["per_position"]) and len(c["per_position"]) <= c["k"]
        if c["draft"] != "lookup":
            assert c["c"] > 0 and c["v"] > 0 and c["bound"] > 0
    top = max(cells, key=lambda c: c["speedup"])
    assert (result.best["draft"], result.best["k"]) == (top["draft"], top["k"])
    assert result.best["speedup"] == pytest.approx(top["speedup"])
    assert result.recommendations["all"] == result.best
    assert {"code", "chat"} <= result.recommendations.keys()
    assert smol_pair.draft is not None and Path(smol_pair.draft.path) == Path(smol_paths[1])  # restored

    files = result.files
    for name in ("speedup_vs_k", "per_position", "measured_vs_predicted"):
        assert Path(files[name]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert Path(files[name]).parent == Path(files["csv"]).parent  # PNGs next to the CSV
    with open(files["csv"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(cells) and {r["draft"] for r in rows} == {c["draft"] for c in cells}
    report = Path(files["report"]).read_text()
    assert "speedup_vs_k.png" in report and "Recommendation" in report

    tuned = load_tuned("demo-smollm2")
    assert tuned["k"] == result.best["k"] and tuned["draft_id"] == result.best["draft"]
    assert tuned["expected_speedup"] == pytest.approx(result.best["speedup"])

    # "restart": a new History on the same file sees the run, cells included
    again = History()
    listed = again.list()
    assert listed[0]["id"] == result.run_id and listed[0]["status"] == "complete"
    stored = again.get(result.run_id)
    assert {(c["draft"], c["k"]) for c in stored["cells"]} == {(c["draft"], c["k"]) for c in cells}
    assert stored["result"]["best"] == json.loads(json.dumps(result.best))
    assert stored["machine"]["llama_cpp"] and stored["machine"]["fingerprint"]
    cmp = again.compare(result.run_id, result.run_id)
    assert all(r["delta"] == 0 for r in cmp["rows"])
    assert again.delete(result.run_id) and again.get(result.run_id) is None
    assert not Path(files["csv"]).exists()


def test_cancel_mid_sweep_leaves_a_partial_history_entry(smol_pair, smol_paths, home):
    cfg = plan(smol_pair, LabRequest(drafts=f"{_draft_id(smol_paths)},lookup", ks="2,4", quick=True,
                                     max_tokens=16))
    cancel = threading.Event()

    def progress(done, total, what, eta):
        if done == 3:  # plain + K=2 + K=4 of the first prompt
            cancel.set()

    result = run_lab(smol_pair, cfg, "demo-smollm2", progress=progress, cancel=cancel)
    assert result.partial and result.runs_done == 3 < result.runs_total
    assert {c["k"] for c in result.cells} == {2, 4}
    assert all(c["prompts"] == 1 and not c["complete"] for c in result.cells)
    assert result.tuned is None and load_tuned("demo-smollm2") is None  # a partial run changes no default
    assert Path(smol_pair.draft.path) == Path(smol_paths[1])

    stored = History().get(result.run_id)
    assert stored["status"] == "partial" and stored["result"]["partial"]
    assert len(stored["cells"]) == len(result.cells)
    assert Path(stored["artifacts"], "cells.csv").is_file()


# --- the command line --------------------------------------------------------------------------------------

def test_tune_cli_writes_json_and_lists_history(home, tmp_path, capsys, monkeypatch):
    from app.cli import main

    out = tmp_path / "tune.json"
    argv = ["tune", "--pair", "demo-smollm2", "--drafts", "lookup", "--k", "2", "--suite", "code",
               "--quick", "--max-tokens", "8", "--ctx", "1024", "--json", str(out)]
    monkeypatch.setattr("sys.argv", ["launcher.py", *argv])
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert data["cells"] and {"draft", "k", "speedup", "acceptance_rate", "mean_accepted", "c", "v",
                              "bound"} <= data["cells"][0].keys()
    assert data["best"]["draft"] == "lookup" and data["best"]["k"] == 2
    text = capsys.readouterr().out
    assert "reproduce: python launcher.py tune" in text and "recommendation" in text

    assert main(["tune", "--history"]) == 0
    assert f"#{data['run_id']}" in capsys.readouterr().out
    assert main(["tune", "--show", str(data["run_id"])]) == 0
    assert "# Tandem Pair lab" in capsys.readouterr().out


def test_candidates_are_the_installed_compatible_drafts_and_lookup(smol_pair, smol_paths, home):
    skipped = []
    cfg = plan(smol_pair, LabRequest(drafts="all", ks="1-3,auto"), on_skip=lambda name, why: skipped.append(name))
    ids = [c.id for c in cfg.candidates]
    assert _draft_id(smol_paths) in ids and "lookup" in ids
    # other installed families (gemma, and qwen when the on-demand pair was fetched) have other vocabularies
    assert not any("gemma" in i or "qwen" in i for i in ids) and any("gemma" in name for name in skipped)
    assert not any("smollm2" in name.lower() for name in skipped)
    assert cfg.ks == [1, 2, 3, "auto"] and cfg.cells()[-1] == ("auto", cfg.p_mins[0])
    assert len(cfg.prompts) == len(builtin_suite()) and cfg.max_tokens == tune.FULL_MAX_TOKENS
    assert any(c.proposer == "auto" for c in cfg.candidates)  # auto ranked beside the single drafters
    with pytest.raises(ValueError, match="unknown draft"):
        plan(smol_pair, LabRequest(drafts="no-such-model"))


def test_tuned_settings_are_per_machine_and_pair(home):
    from app.lab.tuned import machine_info, save_tuned

    here = machine_info()
    other = dict(here, cpu="another CPU", fingerprint="0123456789ab")
    save_tuned("demo-smollm2", {"proposer": "lookup", "draft": None, "k": 3, "p_min": 0.3,
                                "expected_speedup": 1.2})
    assert load_tuned("demo-smollm2")["k"] == 3
    assert load_tuned("demo-smollm2", machine=other) is None and load_tuned("demo-gemma3") is None
    save_tuned("demo-smollm2", {"proposer": "draft", "k": 5}, machine=other)
    assert load_tuned("demo-smollm2")["k"] == 3 and load_tuned("demo-smollm2", machine=other)["k"] == 5


def test_a_run_whose_process_died_reads_as_interrupted(home):
    import sqlite3

    hist = History()
    run_id = hist.start("demo-smollm2", "t.gguf", {"quick": True}, {"fingerprint": "x"})
    assert hist.get(run_id)["status"] == "running"
    with sqlite3.connect(hist.path) as db:
        db.execute("UPDATE runs SET pid = ? WHERE id = ?", (2**22 + 12345, run_id))
    assert hist.list()[0]["status"] == "interrupted" and hist.get(run_id)["cells"] == []


def test_the_completion_suite_sweeps_on_a_fim_model_and_is_refused_without_one(coder_pair, smol_pair, home):
    """The Pair lab's "Code completion (FIM)" row: its prompts are editors' FIM requests, swept like any other on
    a code model; a target without FIM tokens is refused before anything runs."""
    cfg = plan(coder_pair, LabRequest(drafts="lookup", ks="2", suite="fim", quick=True, max_tokens=8))
    assert len(cfg.prompts) == 2 and all(p.infill is not None and p.category == "fim" for p in cfg.prompts)
    result = run_lab(coder_pair, cfg, None, store_tuned=False)
    assert not result.partial and [c["draft"] for c in result.cells] == ["lookup"]
    assert result.cells[0]["prompts"] == 2 and set(result.recommendations) == {"all", "fim"}
    with pytest.raises(ValueError, match="no prefix, suffix, middle tokens for fill-in-the-middle"):
        plan(smol_pair, LabRequest(drafts="lookup", ks="2", suite="fim", quick=True))
