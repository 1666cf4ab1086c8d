"""``launcher.py tune --sizes [1,2,4,8]``: the Pair lab's "how big must the target be?" — the pair's draft against
stand-in targets of growing size (``lab/sizes.py``), with the plots, the recommendation and a history run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app import paths
from app.cli.args import ctrl_c_cancels, fail, load, reproduce_command
from app.lab import sizereport
from app.lab.prompts import PromptFileError, load_prompts
from app.lab.sizes import DEFAULT_FACTORS, DEFAULT_K, DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, FTYPE_CHOICES, \
    SizeConfig, SizeError, parse_factors, pick_prompts, plan
from app.lab.tune import parse_ks
from app.models import hardware
from app.models.catalog import load as load_catalog
from app.models.provision import ensure_model, ensure_pair
from app.numfmt import fmt as _f


def _factors(text: str) -> tuple:
    try:
        return parse_factors(text)
    except SizeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(p: argparse.ArgumentParser) -> None:
    """The size sweep's options, on the ``tune`` command."""
    g = p.add_argument_group("how big must the target be? (stand-in sizes)")
    default = ",".join(map(str, DEFAULT_FACTORS))
    g.add_argument("--sizes", nargs="?", const=DEFAULT_FACTORS, type=_factors, metavar="1,2,4,8",
                   help=f"instead of drafts x K: the pair's draft against its target widened 1 (itself), 2, 4 … "
                        f"times (stand-ins: the same text at a bigger model's cost), derived when missing after a "
                        f"disk and memory check (default {default}; add 8 where memory allows)")
    g.add_argument("--ftype", choices=FTYPE_CHOICES, default="auto",
                   help="the stand-ins' type: auto (the target's own where it fits in memory, else F16), F32, F16")
    g.add_argument("--size-prompts", type=int, default=DEFAULT_PROMPTS, metavar="N",
                   help=f"built-in prompts per size (default {DEFAULT_PROMPTS}; 0: every prompt of --suite)")


def run(args: argparse.Namespace) -> int:
    if args.json_out:
        paths.check_writable(args.json_out)
    if args.temperature:
        fail("the size sweep decodes greedily (its outputs are checked against plain decoding); leave out "
             "--temperature")
    ks = parse_ks(args.k) if args.k else [DEFAULT_K]
    if len(ks) != 1 or not isinstance(ks[0], int):
        fail("the size sweep measures one fixed K at every size, e.g. --k 4 (auto would decode plainly where "
             "drafting loses and hide where it starts to pay)")
    if args.size_prompts < 0:
        fail("--size-prompts is a number of prompts, 0 for all of them")
    try:
        prompts = load_prompts(args.prompts_file, args.suite)
    except PromptFileError as exc:
        fail(str(exc))
    prompts = prompts if args.prompts_file else pick_prompts(prompts, args.size_prompts)
    entry, target, draft = ensure_pair(args.pair)
    cat = load_catalog()
    source_id = cat.models[entry.target].derive_from if cat.models[entry.target].widen else None
    source = ensure_model(cat, source_id) if source_id else target  # a stand-in pair: its source is x1
    cfg = SizeConfig(factors=args.sizes, ftype=args.ftype, k=ks[0], max_tokens=args.max_tokens or DEFAULT_MAX_TOKENS,
                     repeats=max(1, args.repeats), ctx=args.ctx, prompts=prompts)
    plans = plan(source, draft, cfg.factors, hardware.detect(), ftype=cfg.ftype, ctx=cfg.ctx)
    print(f"[sizes] draft {draft.name} against {source.name} and its stand-ins; {len(prompts)} prompts x "
          f"{cfg.max_tokens} tokens, K={cfg.k}, the draft model alone, greedy (Ctrl-C stops and keeps what was "
          "measured)", flush=True)
    for p in plans:
        print(f"[sizes]   {p.line()}", flush=True)
    with ctrl_c_cancels("sizes") as cancel:
        result = sizereport.run_sizes(source, draft, plans, cfg, lambda t, d: load(t, d, args, "sizes")[0],
                                      pair_id=entry.id, progress=_progress, cancel=cancel,
                                      command=reproduce_command(sys.argv))
    print(file=sys.stderr)
    print(format_rows(result))
    print()
    print(result["recommendation"]["line"])
    for s in result["skipped"]:
        print(f"[sizes] skipped {s['size']}: {s['reason']}")
    files = result["files"]
    print(f"[sizes] history run #{result['run_id']} ({result['status']}); plots {files['speedup_vs_size']}, "
          f"{Path(files['speedup_vs_c']).name}; CSV {Path(files['csv']).name}, report {Path(files['report']).name}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
        print(f"[sizes] wrote {args.json_out}")
    print(f"[sizes] reproduce: {result['command']}")
    if not result["rows"] and not result["partial"]:
        fail("no size could be measured here (see the skipped sizes above)")
    return 130 if result["partial"] else 0


def _progress(fraction: float, what: str) -> None:
    if what.endswith("deriving the stand-in"):
        return  # the derive draws its own bar
    print(f"\r[sizes] {fraction:4.0%} {what}"[:100].ljust(100), end="", file=sys.stderr, flush=True)


def format_rows(result: dict) -> str:
    head = (f"{'target':<18} {'params':>7} {'plain t/s':>9} {'spec t/s':>9} {'c':>5} {'accept':>7} {'tok/pass':>8} "
            f"{'speedup':>8} {'spread':>11} {'bound':>6} {'effic.':>6} {'same':>5}")
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        same = "-" if r["identical"] is None else "yes" if r["identical"] else "NO"
        lines.append(f"{r['label'][:18]:<18} {r['params'] / 1e9:>6.2f}B {_f(r['baseline_tps'], '.1f'):>9} "
                     f"{_f(r['spec_tps'], '.1f'):>9} {_f(r['c']):>5} {_f(r['acceptance_rate'], '.1%'):>7} "
                     f"{_f(r['mean_accepted']):>8} {_f(r['speedup'], '.2f', 'x'):>8} "
                     f"{_f(r['speedup_min']) + '-' + _f(r['speedup_max']):>11} {_f(r['bound'], '.2f', 'x'):>6} "
                     f"{_f(r['efficiency']):>6} {same:>5}")
    for r in result["rows"]:
        if r.get("draft_cache"):
            lines.append(f"{r['label']}: {r['draft_cache']}")
        for m in r["mismatches"]:
            lines.append(f"mismatch at {r['label']}: prompt {m['prompt']} at token {m['position']} "
                         f"(top-1/top-2 gap {m['gap']:.3g})")
    return "\n".join(lines)
