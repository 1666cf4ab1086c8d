"""``launcher.py bench --suite fim`` (and prompt files with FIM lines): editors' requests timed to the finished
completion, plain against each proposer and the reference ``perfect`` (``lab/fimbench.py``); the tables, the JSON and
the reproducing command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli.args import reproduce_command
from app.engine.loop import GenConfig
from app.engine.pair import Pair
from app.lab.fimbench import SLOW, RequestBenchResult, run_requests
from app.lab.parting import parting_words
from app.lab.replay import PERFECT
from app.lab.prompts import Prompt
from app.numfmt import fmt as _f

N_PREDICT = 128  # llama.vim's default n_predict


def run(pair: Pair, prompts: list[Prompt], gen: GenConfig, args: argparse.Namespace, pair_id, gpu) -> int:
    result = run_requests(pair, prompts, gen, args.proposers, repeats=args.repeats, progress=_progress,
                          stop_at_suffix=args.stop_at_suffix, reference=args.reference)
    command = reproduce_command(sys.argv)
    print(file=sys.stderr)
    print(format_requests(result))
    for skip in result.skipped:
        print(f"skipped: prompt {skip['id']}: {skip['error']}")
    if args.json_out:
        out = dict(result.to_dict(), pair=pair_id, gpu=gpu, command=command)
        Path(args.json_out).write_text(json.dumps(out, indent=2))
        print(f"[bench] wrote {args.json_out}")
    print(f"[bench] reproduce: {command}")
    return 0


def _progress(done: int, total: int, what: str) -> None:
    print(f"\r[bench] {done}/{total} requests ({what})".ljust(70), end="", file=sys.stderr, flush=True)


def _s(x) -> str:
    return _f(x, ".2f")


def _ends(ends: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(ends.items(), key=lambda kv: -kv[1])) or "-"


def _title(r: RequestBenchResult, name: str) -> str:
    return f"{name} (reference: perfect drafts at K={r.k_reference}, an upper bound, not a drafter)" \
        if name == PERFECT else name


def format_requests(r: RequestBenchResult) -> str:
    """Per prompt: plain and each proposer's median request time and time to first token, the speedup (plain /
    speculative, flagged below SLOW), acceptance, identity, which rule ended the completion; then p50/p95 per mode
    and the ratios; the reference ``perfect`` last, labelled as one."""
    head = f"{'prompt':<24} {'in':>4} {'out':>4} {'end':>8} {'plain s':>7} {'ttft':>5}"
    for name in r.named:
        head += f" | {name[:6] + ' s':>8} {'ttft':>5} {'x':>5} {'acc':>4} {'same':>4}"
    lines = [head, "-" * len(head)]
    for p in r.per_prompt:
        line = (f"{p.id[:24]:<24} {p.prompt_tokens:>4} {p.tokens:>4} {p.end[:8]:>8} {_s(p.plain_s):>7} "
                f"{_s(p.plain_ttft_s):>5}")
        for name in r.named:
            m = p.modes[name]
            same = "yes" if m.identical else ("tie" if (m.mismatch or {}).get("near_tie") else "NO")
            line += (f" | {_s(m.median_s):>8} {_s(m.ttft_s):>5} {_f(m.speedup, '.2f'):>4}{'!' if m.slow else ' '}"
                     f" {_f(m.acceptance_rate, '.0%'):>4} {same:>4}")
        lines.append(line)
    lines.append("-" * len(head))
    pl = r.plain
    lines.append(f"completions end as /infill ends them: end of generation, n_predict, a prompt's n_indent, and the "
                 f"suffix's copy (stop_at_suffix {'on' if r.stop_at_suffix else 'off: --no-stop-at-suffix'}); each "
                 "request is timed to the token that ended it")
    lines.append(f"plain: {pl.requests} requests, p50 {_s(pl.p50_s)} s, p95 {_s(pl.p95_s)} s; time to first token "
                 f"p50 {_s(pl.ttft_p50_s)} s, p95 {_s(pl.ttft_p95_s)} s (prefill p50 {_s(pl.prefill_p50_s)} s); "
                 f"ended by: {_ends(r.plain_ends)}")
    for name in r.named:
        m = r.modes.get(name)
        if m is None:
            continue
        t = m.times
        lines.append(f"{_title(r, name)}: p50 {_s(t.p50_s)} s, p95 {_s(t.p95_s)} s; time to first token p50 "
                     f"{_s(t.ttft_p50_s)} s, p95 {_s(t.ttft_p95_s)} s (prefill p50 {_s(t.prefill_p50_s)} s)")
        lines.append(f"  p50_ratio {_f(m.p50_ratio, '.3f')} (speculative p50 / plain p50), p95 ratio "
                     f"{_f(m.p95_ratio, '.3f')}, ttft ratio {_f(m.ttft_p50_ratio, '.3f')}; per prompt: median "
                     f"{_f(m.median_speedup, '.2f', 'x')}, lowest {_f(m.min_speedup, '.2f', 'x')}; acceptance "
                     f"{_f(m.acceptance_rate, '.1%')}, {_f(m.mean_accepted)} tokens/pass, paused "
                     f"{_f(m.paused, '.0%')}" + (f", lookup's share {_f(m.lookup_share, '.0%')}"
                                                 if m.lookup_share is not None else ""))
        if m.ends != r.plain_ends:
            lines.append(f"  ended by: {_ends(m.ends)} (plain's: {_ends(r.plain_ends)})")
        if name == PERFECT:
            lines.append(f"  every draft token right and drafting free: verify passes alone, the fastest any drafter "
                         f"with K up to {r.k_reference} could make these requests here; a target p50_ratio below "
                         "its own is out of reach")
        if m.slow:
            lines.append(f"  below {SLOW}x plain speed (!): {', '.join(m.slow)}")
        lines.append("  every completion identical to plain decoding" if m.identical else
                     "  completions that differ from plain decoding:")
        for mm in m.mismatches:
            lines.append(f"    {mm['prompt']} at token {mm['position']} ({parting_words(mm)}); {mm['tokens']} tokens "
                         f"against plain's {mm['plain_tokens']}")
        if m.other_lengths:
            lines.append(f"  {len(m.other_lengths)} of them wrote a completion of another length: their times (in "
                         "p50_ratio too) compare different texts, not speculation")
    if r.partial:
        lines.append("partial: cancelled before every request ran")
    return "\n".join(lines)
