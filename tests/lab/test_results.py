"""The typed results keep the JSON contracts: ``Summary``, the bench's ``BenchResult`` / ``PromptRow`` and the Pair
lab's ``Cell`` / ``CellPrompt`` give, through ``to_dict``, exactly the dicts (keys, order, values) that the API,
``bench --json``, the history and the tuned settings had before they were typed. The expected dicts are written
out literally (taken from the untyped implementation on the same steps). Pure: no models."""

from __future__ import annotations

import json
from dataclasses import replace

from app.engine.events import DoneEvent, StepEvent
from app.engine.loop import GenConfig
from app.engine.stats import Stats, pool
from app.engine.summary import Summary
from app.lab import bench, tune
from app.lab.prompts import Prompt

STEPS = [StepEvent(step=0, drafted=4, accepted=2, emitted=3, t_draft=0.0625, t_verify=0.125, k=4, t_step=0.25),
         StepEvent(step=1, drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=0.0625, k=0, t_step=0.0625,
                   paused=True, limit="drafting cannot pay here"),
         StepEvent(step=2, drafted=3, accepted=3, emitted=4, t_draft=0.03125, t_verify=0.125, k=3, t_step=0.1875,
                   probe=True)]

SUMMARY = {  # Stats.summary(8.0) of STEPS as the untyped implementation returned it
    "tokens": 8, "steps": 3, "drafted": 7, "accepted": 5, "acceptance_rate": 0.7142857142857143,
    "mean_accepted": 2.6666666666666665, "alpha": 0.8333333333333334, "mean_k": 3.5, "per_position": [1.0, 1.0, 0.5],
    "histogram": [0, 0, 1, 1], "tested_at": [2, 2, 2], "accepted_at": [2, 2, 1], "rejections": 1, "spec_steps": 2,
    "t_verify_spec": 0.25, "tokens_per_s": 16.0, "t_draft": 0.09375, "t_verify": 0.3125, "t_total": 0.5,
    "baseline_tps": 8.0, "speedup": 2.0, "paused_steps": 1, "probe_steps": 1, "limit": "drafting cannot pay here",
    "c": 0.10714285714285714, "v": 1.0, "bound": 2.442611681028458, "efficiency": 0.8187957240742839,
    # added since, after the old keys: which drafter (two drafters at once) and the MTP head's sync time
    "lookup_drafted": 0, "lookup_accepted": 0, "t_sync": 0.0,
}

BENCH_KEYS = ["baseline_tps", "spec_tps", "speedup", "acceptance_rate", "mean_accepted", "alpha", "identical",
              "mismatches", "c", "v", "bound", "efficiency", "paused", "limit", "k", "mean_k", "per_position",
              "histogram", "proposer", "temperature", "max_tokens", "partial", "reference", "per_prompt", "skipped",
              "lookup_share", "lookup_index_bytes",  # added since (two drafters at once) …
              "draft_cache"]  # … and how the draft model came by the history (kvshare.py)
ROW_KEYS = ["id", "category", "prompt", "baseline_tps", "spec_tps", "speedup", "acceptance_rate", "mean_accepted",
            "alpha", "mean_k", "per_position", "histogram", "c", "v", "bound", "identical", "mismatch", "paused",
            "limit", "tokens", "plain_runs", "spec_runs", "lookup_share"]
REFERENCE_KEYS = ["reference_tps", "reference_ratio", "reference_speedup"]
CELL_KEYS = ["draft", "proposer", "draft_path", "k", "p_min", "speedup", "speedup_min", "speedup_max",
             "acceptance_rate", "mean_accepted", "alpha", "mean_k", "c", "v", "bound", "tps", "baseline_tps",
             "per_position", "paused", "limit", "prompts", "complete", "per_prompt"]
CELL_PROMPT_KEYS = ["id", "category", "speedup", "tps", "baseline_tps", "acceptance_rate", "mean_accepted", "alpha",
                    "mean_k", "c", "v", "bound", "paused", "limit"]


def summary_of(steps, baseline_tps=None) -> Summary:
    stats = Stats()
    for ev in steps:
        stats.add(ev)
    return stats.summary(baseline_tps)


def test_summary_to_dict_is_the_old_dict_key_for_key():
    out = summary_of(STEPS, 8.0).to_dict()
    assert list(out.items()) == list(SUMMARY.items())  # same keys, same order, same values
    assert DoneEvent("eog", summary_of(STEPS, 8.0)).as_dict()["stats"] == SUMMARY
    assert summary_of(STEPS, 8.0).paused_share == 1 / 3


def test_an_empty_summary_is_an_empty_generations():
    empty = Summary()
    assert empty == Stats().summary() and list(empty.to_dict()) == list(SUMMARY)
    assert empty.to_dict() == {**{k: 0 for k in ("tokens", "steps", "drafted", "accepted", "rejections", "spec_steps",
                                                 "paused_steps", "probe_steps", "lookup_drafted", "lookup_accepted")},
                               **{k: 0.0 for k in ("acceptance_rate", "mean_accepted", "alpha", "mean_k",
                                                   "t_verify_spec", "tokens_per_s", "t_draft", "t_verify", "t_total",
                                                   "t_sync")},
                               **{k: [] for k in ("per_position", "histogram", "tested_at", "accepted_at")},
                               **{k: None for k in ("baseline_tps", "speedup", "limit", "c", "v", "bound",
                                                    "efficiency")}}
    assert empty.paused_share is None


def test_pool_sums_counters_and_recomputes_rates():
    pooled = pool([summary_of(STEPS, 8.0), summary_of(STEPS[:1] + STEPS[2:])])
    assert (pooled.drafted, pooled.accepted, pooled.rejections, pooled.spec_steps, pooled.steps, pooled.tokens) == \
        (14, 10, 2, 4, 5, 15)
    assert (pooled.t_draft, pooled.t_verify, pooled.t_verify_spec, pooled.paused_steps, pooled.probe_steps) == \
        (0.1875, 0.5625, 0.5, 1, 2)
    assert (pooled.alpha, pooled.acceptance_rate, pooled.mean_accepted, pooled.mean_k) == \
        (0.8333333333333334, 0.7142857142857143, 3.0, 3.5)
    assert (pooled.tested_at, pooled.accepted_at, pooled.histogram, pooled.per_position) == \
        ([4, 4, 4], [4, 4, 2], [0, 0, 2, 2], [1.0, 1.0, 0.5])
    assert pooled.limit == "drafting cannot pay here" and pooled.paused_share == 0.2
    assert (pooled.baseline_tps, pooled.speedup, pooled.bound) == (None, None, None)  # pooled without a baseline


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
    assert list(out) == BENCH_KEYS and all(list(p) == ROW_KEYS for p in out["per_prompt"])
    assert {k: out[k] for k in BENCH_KEYS if k != "per_prompt"} == {
        "baseline_tps": 8.0, "spec_tps": 16.0, "speedup": 2.0, "acceptance_rate": 0.7142857142857143,
        "mean_accepted": 2.8181818181818183, "alpha": 0.8333333333333334, "identical": True, "mismatches": [],
        "c": 0.10714285714285714, "v": 1.0, "bound": 2.442611681028458, "efficiency": 0.8187957240742839,
        "paused": 0.2727272727272727, "limit": "drafting cannot pay here", "k": "auto", "mean_k": 3.5,
        "per_position": [1.0, 1.0, 0.5], "histogram": [0, 0, 4, 4], "proposer": "draft", "temperature": 0.0,
        "max_tokens": 8, "partial": False, "reference": None, "skipped": skipped, "lookup_share": 0.0,
        "lookup_index_bytes": None, "draft_cache": None}
    assert out["per_prompt"][1] == {
        "id": "p2", "category": "chat", "prompt": "hi", "baseline_tps": 8.0, "spec_tps": 16.0, "speedup": 2.0,
        "acceptance_rate": 0.7142857142857143, "mean_accepted": 3.0, "alpha": 0.8333333333333334, "mean_k": 3.5,
        "per_position": [1.0, 1.0, 0.5], "histogram": [0, 0, 2, 2], "c": 0.10714285714285714, "v": 1.0,
        "bound": 2.442611681028458, "identical": True, "mismatch": None, "paused": 0.2,
        "limit": "drafting cannot pay here", "tokens": 2, "plain_runs": [8.0, 8.0], "spec_runs": [16.0, 16.0],
        "lookup_share": 0.0}
    assert json.loads(json.dumps(out)) == out  # plain JSON all the way down

    with_ref = [replace(rows[0], reference_tps=7.0, reference_ratio=0.5, reference_speedup=None), rows[1]]
    out = bench._aggregate(with_ref, cfg, True, "bare", []).to_dict()
    assert list(out["per_prompt"][0]) == ROW_KEYS + REFERENCE_KEYS and list(out["per_prompt"][1]) == ROW_KEYS
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
        "prompts": 2, "complete": False}
    assert out["per_prompt"][1] == {
        "id": "p2", "category": "chat", "speedup": None, "tps": 16.0, "baseline_tps": None,
        "acceptance_rate": 0.7142857142857143, "mean_accepted": 3.5, "alpha": 0.8333333333333334, "mean_k": 3.5,
        "c": None, "v": None, "bound": None, "paused": 0.0, "limit": None}
    assert json.loads(json.dumps(out)) == out
