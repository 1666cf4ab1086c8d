"""The typed results keep the JSON contracts: the bench's ``BenchResult`` / ``PromptRow`` and the Pair lab's
``Cell`` / ``CellPrompt`` give, through ``to_dict``, exactly the dicts (keys, order, values) that ``bench --json``,
the history and the tuned settings had before they were typed (``Summary``'s own contract is checked in
tests/engine/test_summary.py). The expected dicts are written out literally (taken from the untyped implementation
on the same steps). Pure: no models."""

from __future__ import annotations

import json
from dataclasses import replace

from app.engine.events import DoneEvent, StepEvent
from app.engine.loop import GenConfig
from app.engine.stats import Stats
from app.lab import bench, tune
from app.lab.prompts import Prompt

from support.steps import STEPS, summary_of

BENCH_KEYS = ["baseline_tps", "spec_tps", "speedup", "acceptance_rate", "mean_accepted", "alpha", "identical",
              "mismatches", "c", "v", "bound", "efficiency", "paused", "limit", "k", "mean_k", "per_position",
              "histogram", "proposer", "temperature", "max_tokens", "partial", "reference", "per_prompt", "skipped",
              "lookup_share", "lookup_index_bytes",  # added since (two drafters at once) …
              "draft_cache",  # … and how the draft model came by the history (kvshare.py) …
              "slow", "guard",  # … and the prompts below the guard (benchguard.py) …
              "unsteady",  # … and those whose timings were unsteady (benchguard.py) …
              "tree"]  # … and proposer tree's figures (decoding/tree.py)
ROW_KEYS = ["id", "category", "prompt", "baseline_tps", "spec_tps", "speedup", "acceptance_rate", "mean_accepted",
            "alpha", "mean_k", "per_position", "histogram", "c", "v", "bound", "identical", "mismatch", "paused",
            "limit", "tokens", "plain_runs", "spec_runs", "lookup_share"]
REFERENCE_KEYS = ["reference_tps", "reference_ratio", "reference_speedup"]
WHERE_KEYS = ["where", "unsteady"]  # null unless the prompt is below the guard / its timings were unsteady
CELL_KEYS = ["draft", "proposer", "draft_path", "k", "p_min", "speedup", "speedup_min", "speedup_max",
             "acceptance_rate", "mean_accepted", "alpha", "mean_k", "c", "v", "bound", "tps", "baseline_tps",
             "per_position", "paused", "limit", "prompts", "complete", "repeat_min", "repeat_max", "per_prompt"]
CELL_PROMPT_KEYS = ["id", "category", "speedup", "tps", "baseline_tps", "acceptance_rate", "mean_accepted", "alpha",
                    "mean_k", "c", "v", "bound", "paused", "limit"]


def test_stats_times_a_running_generation_from_the_clock_it_is_given():
    from app.service.runner import Live

    stats = Stats()
    stats.add(STEPS[0], now=10.0)  # decoding began t_draft + t_verify = 0.1875 s before this step arrived
    stats.add(STEPS[1], now=10.5)
    assert stats.t_first == 10.0 - 0.1875 and stats.wall == 0.6875
    assert stats.summary(wall=True).t_total == 0.6875 and stats.summary(wall=True).tokens_per_s == 4 / 0.6875
    assert stats.summary().t_total == 0.3125  # the steps' own seconds, as the engine reports them
    assert Stats().summary(wall=True).t_total == 0.0 and Stats().wall is None

    live = Live(speculative=True, baseline_tps=2.0)
    live.add(STEPS[0], 10.0)
    live.add(STEPS[1], 10.5)
    assert live.decode_start == 10.0 - 0.1875
    running = live.summary()
    assert running.t_total == 0.6875 and running.speedup == 4 / 0.6875 / 2.0
    assert live.stats.t_total == 0.3125  # nobody wrote the stats' own fields from outside
    done = DoneEvent("eog", summary_of(STEPS, 8.0))
    live.add(done, 11.0)
    assert live.summary() is done.stats


def _bench_rows(cfg: GenConfig) -> list:
    spec_a, spec_b = summary_of(STEPS, 8.0), summary_of(STEPS[:1] + STEPS[2:])
    plain = summary_of([StepEvent(step=i, drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=0.1, k=0,
                                  t_step=0.125) for i in range(8)])
    rows = []
    for i, prompt in enumerate([Prompt(id="p1", category="code", prompt="def f():"),
                                Prompt(id="p2", category="chat", prompt="hi")]):
        plain_runs = [bench.RunResult([5, 6], plain)] * 2
        spec_runs = [bench.RunResult([5, 6], spec_a), bench.RunResult([5, 6], spec_b if i else spec_a)]
        rows.append(bench._prompt_result(None, prompt, [1, 2], plain_runs, spec_runs, cfg))
    return rows


def test_bench_result_to_dict_is_the_bench_json_contract():
    cfg = GenConfig(max_tokens=8, k="auto", proposer="draft")
    rows = _bench_rows(cfg)
    skipped = [{"id": "p3", "category": "x", "error": "too long"}]
    out = bench._aggregate(rows, cfg, False, None, skipped).to_dict()
    assert list(out) == BENCH_KEYS and all(list(p) == ROW_KEYS + WHERE_KEYS for p in out["per_prompt"])
    assert {k: out[k] for k in BENCH_KEYS if k != "per_prompt"} == {
        "baseline_tps": 8.0, "spec_tps": 16.0, "speedup": 2.0, "acceptance_rate": 0.7142857142857143,
        "mean_accepted": 2.8181818181818183, "alpha": 0.8333333333333334, "identical": True, "mismatches": [],
        "c": 0.10714285714285714, "v": 1.0, "bound": 2.442611681028458, "efficiency": 0.8187957240742839,
        "paused": 0.2727272727272727, "limit": "drafting cannot pay here", "k": "auto", "mean_k": 3.5,
        "per_position": [1.0, 1.0, 0.5], "histogram": [0, 0, 4, 4], "proposer": "draft", "temperature": 0.0,
        "max_tokens": 8, "partial": False, "reference": None, "skipped": skipped, "lookup_share": 0.0,
        "lookup_index_bytes": None, "draft_cache": None, "slow": [], "guard": 0.95, "unsteady": [], "tree": None}
    assert out["per_prompt"][1] == {
        "id": "p2", "category": "chat", "prompt": "hi", "baseline_tps": 8.0, "spec_tps": 16.0, "speedup": 2.0,
        "acceptance_rate": 0.7142857142857143, "mean_accepted": 3.0, "alpha": 0.8333333333333334, "mean_k": 3.5,
        "per_position": [1.0, 1.0, 0.5], "histogram": [0, 0, 2, 2], "c": 0.10714285714285714, "v": 1.0,
        "bound": 2.442611681028458, "identical": True, "mismatch": None, "paused": 0.2,
        "limit": "drafting cannot pay here", "tokens": 2, "plain_runs": [8.0, 8.0], "spec_runs": [16.0, 16.0],
        "lookup_share": 0.0, "where": None, "unsteady": None}
    assert json.loads(json.dumps(out)) == out  # plain JSON all the way down

    with_ref = [replace(rows[0], reference_tps=7.0, reference_ratio=0.5, reference_speedup=None), rows[1]]
    out = bench._aggregate(with_ref, cfg, True, "bare", []).to_dict()
    assert list(out["per_prompt"][0]) == ROW_KEYS + REFERENCE_KEYS + WHERE_KEYS
    assert list(out["per_prompt"][1]) == ROW_KEYS + WHERE_KEYS
    assert out["reference"] == {"kind": "bare", "tps": 7.0, "ratio": 0.5, "speedup": None,
                                "compares": "plain tokens/s"}
    empty = bench._aggregate([], cfg, True, "bare-spec", []).to_dict()  # cancelled before the first prompt
    assert list(empty) == BENCH_KEYS and empty["per_prompt"] == [] and empty["partial"] is True
    assert all(empty[k] is None for k in ("baseline_tps", "acceptance_rate", "paused", "limit", "mean_k"))


def test_cell_to_dict_is_the_stored_cell():
    spec_a, spec_b = summary_of(STEPS, 8.0), summary_of(STEPS[:1] + STEPS[2:])
    prompts = [Prompt(id="p1", category="code", prompt="x"), Prompt(id="p2", category="chat", prompt="y")]
    entries = [tune._prompt_entry(prompts[0], [(spec_a, 10.0), (spec_b, 12.0)]),
               tune._prompt_entry(prompts[1], [(spec_b, None)])]
    cell = tune.cell_summary(tune.Candidate("d", "draft", "/m/d.gguf"), "auto", 0.0, entries, 3)
    out = cell.to_dict()
    assert list(out) == CELL_KEYS and all(list(p) == CELL_PROMPT_KEYS for p in out["per_prompt"])
    assert {k: out[k] for k in CELL_KEYS if k != "per_prompt"} == {
        "draft": "d", "proposer": "draft", "draft_path": "/m/d.gguf", "k": "auto", "p_min": 0.0,
        "speedup": 1.4666666666666668, "speedup_min": 1.4666666666666668, "speedup_max": 1.4666666666666668,
        "acceptance_rate": 0.7142857142857143, "mean_accepted": 3.25, "alpha": 0.8333333333333334, "mean_k": 3.5,
        "c": 0.14732142857142855, "v": 1.375, "bound": 1.7764448589297877, "tps": 16.0, "baseline_tps": 11.0,
        "per_position": [1.0, 1.0, 0.5], "paused": 0.14285714285714285, "limit": "drafting cannot pay here",
        "prompts": 2, "complete": False, "repeat_min": 16.0 / 12.0, "repeat_max": 16.0 / 10.0}
    assert out["per_prompt"][1] == {
        "id": "p2", "category": "chat", "speedup": None, "tps": 16.0, "baseline_tps": None,
        "acceptance_rate": 0.7142857142857143, "mean_accepted": 3.5, "alpha": 0.8333333333333334, "mean_k": 3.5,
        "c": None, "v": None, "bound": None, "paused": 0.0, "limit": None}
    assert json.loads(json.dumps(out)) == out


def test_a_tree_bench_carries_its_tree_figures_in_the_json_and_the_table():
    from app.cli.bench import format_table

    cfg = GenConfig(max_tokens=8, k=4, proposer="tree")
    tree_steps = [StepEvent(step=0, drafted=6, accepted=3, emitted=4, t_draft=0.01, t_verify=0.1, k=4, t_step=0.125,
                            tree=2, branch_hit=True),
                  StepEvent(step=1, drafted=5, accepted=4, emitted=5, t_draft=0.01, t_verify=0.1, k=4, t_step=0.125,
                            tree=1)]
    plain = summary_of([StepEvent(step=i, drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=0.1, k=0,
                                  t_step=0.125) for i in range(9)])
    row = bench._prompt_result(None, Prompt(id="p1", category="chat", prompt="hi"), [1, 2],
                               [bench.RunResult([5, 6], plain)], [bench.RunResult([5, 6], summary_of(tree_steps))], cfg)
    result = bench._aggregate([row], cfg, False, None, [])
    assert result.to_dict()["tree"] == {"passes": 2, "branch_tokens": 3, "path": 3.5, "branch_hits": 1,
                                        "tokens_per_pass": 4.5}
    assert "tree: 2 target passes verified 3 branch tokens beside the chain; a pass kept 3.50 draft tokens on " \
           "average, 1 kept a branch; 4.50 tokens per target pass" in format_table(result)
    assert bench._aggregate(_bench_rows(GenConfig(max_tokens=8, proposer="draft")), GenConfig(proposer="draft"),
                            False, None, []).tree is None
