"""The engine bench's per-prompt guards: a prompt whose speculative runs were slower than ``GUARD`` × plain speed
is flagged with where their time went against plain's; a prompt whose timings were unsteady (another process
took the machine during some runs: :func:`unsteady`) is flagged so its ratio is not taken for the pair's.

The breakdown reads the speculative runs' steps (``StepEvent``) and the plain runs' summaries, each summed over
the repeats. Its parts add up to the gap (speculative decode seconds − plain's) exactly:

- ``drafting_s``: the draft's own decoding (draft seconds less catch-ups, wakes apart);
- ``catch_up_s``: the draft reading history it had not seen (``t_sync``);
- ``wake_s``: a paused controller timing draft tokens it did not propose (re-measuring the draft's cost);
- ``verify_drafts_s``: verify passes that carried drafts, less the plain steps their tokens would have taken
  (negative: drafting saved time there);
- ``plain_steps_s``: the speculative runs' plain steps against as many of plain's own (the same work on the same
  model: timing noise between runs), and any difference in the number of tokens written;
- ``bookkeeping_s``: the rest of the steps' wall time, against plain's.

Probes (``probes``, ``free_probes``) overlap those parts: ``probe_extra_s`` is what the probe steps cost beyond
the plain steps their tokens would have taken.
"""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

from app.engine.events import StepEvent
from app.engine.summary import Summary
from app.numfmt import fmt

GUARD = 0.95  # a prompt whose speculative runs are slower than this share of plain speed is flagged
# The same work timed this many times slower in some runs than in others: the machine was busier then (two-thread
# llama.cpp beside another process on two cores runs 30-100x slower in spells), and a ratio of such runs may
# flatter either mode. Quiet runs here differ by 10-20 %.
STEADY = 1.5
MIN_BARE = 5  # one-token passes of the speculative runs needed to compare them with plain's

# the parts of the gap, as the words name them
PARTS = (("drafting_s", "drafting"), ("catch_up_s", "catch-ups"), ("wake_s", "wakes"),
         ("verify_drafts_s", "verifying drafts beyond plain steps"),
         ("plain_steps_s", "plain steps against plain's own (timing noise between runs)"),
         ("bookkeeping_s", "bookkeeping"))


def flagged(speedup: Optional[float], floor: float = GUARD) -> bool:
    return speedup is not None and speedup < floor


def unsteady(steps: Sequence[StepEvent], plain: Sequence[Summary], steady: float = STEADY) -> Optional[str]:
    """Why a prompt's timings cannot be trusted, in words, or None: the plain runs' speeds spread by more than
    ``steady`` times, or the speculative runs' one-token passes (drafting paused: the target's pass alone, as in
    plain decoding) took more than ``steady`` times as long as plain's, or less than 1 / ``steady``."""
    why = []
    speeds = [s.tokens_per_s for s in plain if s.tokens_per_s > 0]
    if len(speeds) > 1 and max(speeds) > steady * min(speeds):
        why.append(f"plain runs went {min(speeds):.1f}-{max(speeds):.1f} tokens/s")
    plain_pass = median([s.t_verify / s.steps for s in plain if s.steps])
    bare = median([e.t_verify for e in steps if not e.drafted and e.emitted == 1])
    n_bare = sum(1 for e in steps if not e.drafted and e.emitted == 1)
    if plain_pass and bare and n_bare >= MIN_BARE and not 1 / steady <= bare / plain_pass <= steady:
        why.append(f"a one-token target pass took {bare * 1e3:.1f} ms in the speculative runs and "
                   f"{plain_pass * 1e3:.1f} ms in plain's (the same work)")
    return "; ".join(why) or None


def median(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def where(steps: Sequence[StepEvent], plain: Sequence[Summary]) -> dict:
    """Where the speculative runs' time went (``steps``: every step of every run) against the plain runs' (their
    summaries), in seconds summed over the runs; the ``PARTS`` add up to ``gap_s``."""
    plain_s = sum(s.t_total for s in plain)
    plain_verify_s = sum(s.t_verify for s in plain)
    plain_steps = sum(s.steps for s in plain)
    step_s = plain_s / plain_steps if plain_steps else 0.0  # a plain step, bookkeeping included
    verify_s = plain_verify_s / plain_steps if plain_steps else 0.0  # its pass alone
    carried = [e for e in steps if e.drafted]
    bare = [e for e in steps if not e.drafted]
    probes = [e for e in steps if e.probe]
    wakes = [e for e in steps if e.wake]
    spec_s = sum(e.t_step for e in steps)
    spec_verify_s = sum(e.t_verify for e in steps)
    catch_up_s = sum(e.t_sync for e in steps)
    wake_s = sum(e.t_draft - e.t_sync for e in wakes)
    drafting_s = sum(e.t_draft for e in steps) - catch_up_s - wake_s
    verify_drafts_s = sum(e.t_verify for e in carried)
    verify_plain_s = sum(e.t_verify for e in bare)
    drafted_tokens = sum(e.emitted for e in carried)
    out = {
        "runs": len(plain),
        "plain_s": plain_s, "plain_verify_s": plain_verify_s, "plain_steps": plain_steps,
        "spec_s": spec_s, "spec_verify_s": spec_verify_s, "spec_steps": len(steps),
        "paused": sum(e.paused for e in steps) / len(steps) if steps else None,
        "draft_passes": len(carried), "draft_passes_s": verify_drafts_s,
        "plain_passes": len(bare), "plain_passes_s": verify_plain_s,
        "probes": len(probes), "free_probes": sum(e.free_probe for e in probes),
        "probe_extra_s": sum(e.t_step - e.emitted * step_s for e in probes),
        "wakes": len(wakes),
        "lookup_proposed": sum(e.lookup for e in steps), "lookup_kept": sum(e.lookup_accepted for e in steps),
        "gap_s": spec_s - plain_s,
        "drafting_s": drafting_s, "catch_up_s": catch_up_s, "wake_s": wake_s,
        "verify_drafts_s": verify_drafts_s - drafted_tokens * verify_s,
        "plain_steps_s": spec_verify_s - verify_drafts_s + drafted_tokens * verify_s - plain_verify_s,
        "bookkeeping_s": (spec_s - spec_verify_s - drafting_s - catch_up_s - wake_s) - (plain_s - plain_verify_s),
    }
    return {k: round(float(v), 4) if k.endswith("_s") or (k == "paused" and v is not None) else v
            for k, v in out.items()}


def words(pid: str, speedup: Optional[float], w: dict) -> str:
    """One line: where a flagged prompt's time went (``w``: its :func:`where`)."""
    runs = f" ({w['runs']} runs each)" if w["runs"] > 1 else ""
    paused = f"paused {w['paused']:.0%}" if w["paused"] is not None else "no steps"
    probes = f"{w['probes']} probes cost {w['probe_extra_s']:+.2f} s" \
             + (f" ({w['free_probes']} free)" if w["free_probes"] else "")
    lookup = f"; lookup kept {w['lookup_kept']} of {w['lookup_proposed']} proposed" if w["lookup_proposed"] else ""
    parts = ", ".join(f"{name} {w[key]:+.2f} s" for key, name in PARTS if round(w[key], 2))
    worst = max(PARTS, key=lambda part: w[part[0]])
    most = f" — most of it: {worst[1]}" if w["gap_s"] > 0 and w[worst[0]] > 0 else ""
    return (f"{pid} {fmt(speedup, '.2f', 'x')}{runs}: {paused}; {probes}, {w['wakes']} wakes {w['wake_s']:.2f} s, "
            f"catch-ups {w['catch_up_s']:.2f} s, drafting {w['drafting_s']:.2f} s; verify passes "
            f"{w['spec_verify_s']:.2f} s against plain's {w['plain_verify_s']:.2f} s{lookup}; "
            f"{w['gap_s']:+.2f} s in all: {parts or 'nothing measurable'}{most}")
