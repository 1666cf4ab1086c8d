"""Hand-made steps of one generation and their figures (``Stats.summary``), shared by the tests of the engine's
statistics (tests/engine/test_stats.py, test_summary.py) and of the results the lab builds on them
(tests/lab/test_results.py)."""

from __future__ import annotations

from app.engine.events import StepEvent
from app.engine.stats import Stats
from app.engine.summary import Summary

STEPS = [StepEvent(step=0, drafted=4, accepted=2, emitted=3, t_draft=0.0625, t_verify=0.125, k=4, t_step=0.25),
         StepEvent(step=1, drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=0.0625, k=0, t_step=0.0625,
                   paused=True, limit="drafting cannot pay here"),
         StepEvent(step=2, drafted=3, accepted=3, emitted=4, t_draft=0.03125, t_verify=0.125, k=3, t_step=0.1875,
                   probe=True)]


def summary_of(steps, baseline_tps=None) -> Summary:
    stats = Stats()
    for ev in steps:
        stats.add(ev)
    return stats.summary(baseline_tps)
