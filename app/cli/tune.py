"""``launcher.py tune …``: the Pair lab headless — sweep drafts and K on this machine, keep the history."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from app import paths
from app.cli import sizes
from app.cli.args import add_gpu_args, ctrl_c_cancels, fail, limit, load, reproduce_command
from app.engine import limits
from app.engine.loop import DEFAULT_P_MIN
from app.lab.prompts import PromptFileError
from app.lab.history import History
from app.lab.lab import LabRequest, plan, run_lab
from app.lab.report import compare_markdown, k_label, recommendation_line
from app.lab.result import SweepResult
from app.lab.tune import parse_ks
from app.lab.tuned import describe_machine, machine_info
from app.models.provision import ensure_pair
from app.numfmt import fmt as _f


def _p_mins(text: str) -> tuple:
    try:
        if len(text) > limits.LIST_CHARS:
            raise limits.LimitError(f"the --p-min list is {len(text)} characters; at most {limits.LIST_CHARS}")
        values = tuple(limits.parse_number("p_min", x.strip()) for x in text.split(",") if x.strip())
    except limits.LimitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not values:
        raise argparse.ArgumentTypeError("--p-min needs at least one value")
    return values


def _ks(text: str) -> str:
    try:
        parse_ks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="find the fastest draft and K for a pair on this machine (Pair lab)")
    p.add_argument("--pair", default=None, help="catalog pair id (default: the catalog's default pair)")
    p.add_argument("--drafts", default="all",
                   help="comma list of draft ids/file names and 'lookup', or all (every installed compatible model)")
    p.add_argument("--k", type=_ks, default=None, help="K values: 1,2,4,8 or 1-12, 'auto' allowed "
                                                       "(default: 2,4,8 with --quick, else 1-4,6,8,auto)")
    p.add_argument("--suite", default="all", help="built-in suite category: all, code, chat, summarize, math, edit, "
                                                  "or a comma list; fim: editors' completion requests (alone)")
    p.add_argument("--prompts-file", help='JSON lines: {"prompt": …} or {"messages": […]}, optional "category"')
    p.add_argument("--max-tokens", type=limit("max_tokens"), default=None, help="tokens per run (default: 32 quick, 128 full)")
    p.add_argument("--temperature", type=limit("temperature"), default=0.0)
    p.add_argument("--seed", type=limit("seed"), default=0)
    p.add_argument("--p-min", type=_p_mins, default=(DEFAULT_P_MIN,), help="p_min values tried with K=auto")
    p.add_argument("--repeats", type=limit("repeats"), default=1, help="rounds over the prompts (medians over them)")
    p.add_argument("--quick", action="store_true", help="about 30 s on the demo pair: own draft + lookup, "
                                                        "K 2,4,8, two short prompts")
    p.add_argument("--threads", type=limit("threads"), default=0, help="CPU threads (default: physical cores)")
    p.add_argument("--ctx", type=limit("ctx"), default=2048, help="context size")
    p.add_argument("--json", dest="json_out", help="write the result (cells, best, recommendations) here")
    p.add_argument("--no-save", action="store_true", help="do not make the result this machine's defaults")
    add_gpu_args(p)
    g = p.add_argument_group("history")
    g.add_argument("--history", action="store_true", help="list stored runs and exit")
    g.add_argument("--show", type=limit("run id", "run_id"), metavar="ID", help="print a stored run's report")
    g.add_argument("--compare", metavar="A,B", help="compare two stored runs")
    g.add_argument("--delete", type=limit("run id", "run_id"), metavar="ID", help="delete a stored run and its files")
    sizes.register(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.history or args.show or args.compare or args.delete:
        return _history(args)
    if args.sizes is not None:
        return sizes.run(args)
    return _sweep(args)


def _sweep(args: argparse.Namespace) -> int:
    if args.json_out:
        paths.check_writable(args.json_out)  # before the sweep, not after it
    entry, target, draft = ensure_pair(args.pair)
    req = LabRequest(drafts=args.drafts, ks=args.k, suite=args.suite, prompts_file=args.prompts_file,
                     max_tokens=args.max_tokens, temperature=args.temperature, quick=args.quick,
                     repeats=max(1, args.repeats), p_mins=args.p_min, seed=args.seed)
    pair, gpu = load(target, draft, args, "tune")
    with pair:
        try:
            cfg = plan(pair, req, on_skip=lambda name, why: print(f"[tune] skip {name}: {why}", file=sys.stderr))
        except (ValueError, PromptFileError) as exc:
            fail(str(exc))
        print(f"[tune] pair {entry.id} on {describe_machine(machine_info())}", flush=True)
        print(f"[tune] drafts: {', '.join(c.id for c in cfg.candidates)}; K: {', '.join(map(str, cfg.ks))}; "
              f"{len(cfg.prompts)} prompts x {cfg.max_tokens} tokens; {cfg.total_runs()} runs "
              "(Ctrl-C stops and keeps a partial result)", flush=True)
        with ctrl_c_cancels("tune") as cancel:
            result = run_lab(pair, cfg, entry.id, progress=_progress, cancel=cancel,
                             command=reproduce_command(sys.argv), store_tuned=not (args.no_save or args.quick))
    result.stamp(gpu=gpu)
    print(file=sys.stderr)
    print(format_cells(result))
    print()
    print(format_recommendations(result))
    for skip in result.skipped:
        print(f"[tune] skipped prompt {skip['id']}: {skip['error']}")
    if result.status == "failed":
        print(f"[tune] history run #{result.run_id} stored as failed", file=sys.stderr)
        fail(f"no draft could be measured ({'; '.join(e['draft'] for e in result.errors) or 'none'}) — see the "
             "failed rows above; check the files with `python launcher.py models check`")
    if result.partial:
        print(f"[tune] cancelled: partial result ({result.runs_done}/{result.runs_total} runs), "
              "stored as partial; defaults unchanged")
    elif result.tuned:
        print(f"[tune] saved as this machine's defaults for {entry.id} (Chat and Compare)")
    elif args.quick:
        print("[tune] a quick sweep does not change this machine's defaults; run without --quick to save them")
    files = result.files
    print(f"[tune] history run #{result.run_id}; plots {Path(files['speedup_vs_k']).parent}/*.png, "
          f"CSV {files['csv']}, report {files['report']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result.to_dict(), indent=2))
        print(f"[tune] wrote {args.json_out}")
    print(f"[tune] reproduce: {result.command}")
    return 130 if result.partial else 0


def _progress(done: int, total: int, what: str, eta: Optional[float]) -> None:
    eta_text = "" if eta is None else f", ETA {_duration(eta)}"
    print(f"\r[tune] {done}/{total} runs{eta_text} ({what})"[:100].ljust(100), end="", file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def format_cells(r: SweepResult) -> str:
    head = (f"{'draft':<28} {'K':>15} {'speedup':>8} {'spread':>11} {'accept':>7} {'tok/pass':>8} "
            f"{'c':>5} {'v':>5} {'bound':>6} {'paused':>6} {'tok/s':>6}")
    lines = [head, "-" * len(head)]
    for c in sorted(r.cells, key=lambda c: (c["draft"], str(c["k"]).zfill(4))):
        spread = f"{_f(c['speedup_min'])}-{_f(c['speedup_max'])}"
        lines.append(f"{c['draft'][:28]:<28} {k_label(c)[:15]:>15} {_f(c['speedup'], '.2f', 'x'):>8} {spread:>11} "
                     f"{_f(c['acceptance_rate'], '.1%'):>7} {_f(c['mean_accepted']):>8} {_f(c['c']):>5} "
                     f"{_f(c['v']):>5} {_f(c['bound'], '.2f', 'x'):>6} {_f(c.get('paused'), '.0%'):>6} "
                     f"{_f(c['tps'], '.1f'):>6}")
    lines.append(f"{'off (plain decoding)':<28} {'-':>15} {'1.00x':>8}")
    for err in r.errors:  # a draft that could not be loaded or run: a failed row
        lines.append(f"{err['draft'][:28]:<28} {'FAILED':>15}  {err['error']}")
    lines.append("-" * len(head))
    for text in sorted({c["limit"] for c in r.cells if c.get("limit")}):
        lines.append(f"auto K paused speculation: {text}")
    lines.append(f"plain decoding: {_f(r.baseline_tps, '.1f')} tok/s (median); "
                 f"{r.runs_done} runs in {r.duration_s} s")
    return "\n".join(lines)


def format_recommendations(r: SweepResult) -> str:
    lines = ["recommendation (best median speedup):"]
    for cat, rec in r.recommendations.items():
        lines.append(f"  {cat:<10} {recommendation_line(rec)}")
    return "\n".join(lines)


def _history(args: argparse.Namespace) -> int:
    hist = History()
    if args.delete:
        ok = hist.delete(args.delete)
        print(f"[tune] {'deleted' if ok else 'no such'} run #{args.delete}")
        return 0 if ok else 1
    if args.compare:
        try:
            a, b = (limits.run_id(x) for x in args.compare.split(","))
            print(compare_markdown(hist.compare(a, b)))
        except (ValueError, KeyError) as exc:
            fail(f"--compare needs two stored run ids A,B ({exc})")
        return 0
    if args.show:
        run = hist.get(args.show)
        if run is None:
            print(f"error: no run #{args.show}", file=sys.stderr)
            return 1
        report = Path(run["artifacts"] or "", "report.md")
        print(report.read_text(encoding="utf-8") if run["artifacts"] and report.is_file()
              else json.dumps(run, indent=2))
        return 0
    runs = hist.list(args.pair)
    if not runs:
        print("[tune] no runs stored yet")
    for run in runs:
        print(f"#{run['id']:<4} {run['created_at']}  {run['pair_id'] or '-':<14} {run['status']:<11} "
              f"{run['kind']:<5}  {recommendation_line(run['best'])}")
    return 0
