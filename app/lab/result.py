"""What a sweep gives: :class:`SweepResult`, typed; ``to_dict`` is the JSON contract (result.json, the history,
``tune --json``, the Benchmark tab), key for key and in the same order as before it was typed.

The sweep fills the measured fields; the Pair lab then stamps the run's facts on it (pair, history id, machine,
command, artifact files, status, the tuned settings saved), and the ``tune`` command the GPU report: each
appears in the JSON once stamped, in the order stamped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

STAMPS = ("pair", "run_id", "machine", "command", "files", "status", "tuned", "gpu")


@dataclass
class SweepResult:
    cells: list[dict] = field(default_factory=list)  # Cell.to_dict of every (draft, K, p_min) measured
    best: Optional[dict] = None  # the recommendation over every prompt (tune.best_cell)
    recommendations: dict = field(default_factory=dict)  # {category: recommendation}, "all" included
    partial: bool = False  # cancelled: the cells hold only what was measured
    errors: list[dict] = field(default_factory=list)  # {"draft", "error"}: drafts that failed
    skipped: list[dict] = field(default_factory=list)  # prompts past the context
    baselines: list[dict] = field(default_factory=list)  # {"prompt", "tps"}: the interleaved plain runs
    baseline_tps: Optional[float] = None  # their median
    target: str = ""  # the target's file name
    config: dict = field(default_factory=dict)  # TuneConfig.describe()
    runs_done: int = 0
    runs_total: int = 0
    started_at: str = ""
    duration_s: float = 0.0
    # stamped afterwards (see the module's docstring)
    pair: Optional[str] = None
    run_id: Optional[int] = None
    machine: Optional[dict] = None
    command: Optional[str] = None
    files: dict = field(default_factory=dict)  # {name: path} of the artifacts
    status: str = ""  # complete, partial or failed
    tuned: Optional[dict] = None  # the settings saved as this machine's defaults (None: none saved)
    gpu: Optional[dict] = None  # the GPU report of the pair it ran on
    stamped: list[str] = field(default_factory=list, repr=False)

    def stamp(self, **facts: Any) -> "SweepResult":
        """Set facts of the run (names from STAMPS); they join the JSON in this order."""
        for name, value in facts.items():
            if name not in STAMPS:
                raise AttributeError(f"not a fact of a sweep's run: {name}")
            setattr(self, name, value)
            if name not in self.stamped:
                self.stamped.append(name)
        return self

    def to_dict(self) -> dict:
        measured = {f.name: getattr(self, f.name) for f in fields(self)
                    if f.name not in STAMPS and f.name != "stamped"}
        return {**measured, **{name: getattr(self, name) for name in self.stamped}}

    @classmethod
    def from_dict(cls, data: dict) -> "SweepResult":
        """A stored result (result.json, the history) as a SweepResult."""
        names = {f.name for f in fields(cls)} - set(STAMPS) - {"stamped"}
        out = cls(**{k: v for k, v in data.items() if k in names})
        return out.stamp(**{k: data[k] for k in STAMPS if k in data})
