"""Command line: ``launcher.py [ui options]`` starts the app; subcommands give the same features headless."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("ui", "setup", "bench", "models", "tune", "test")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launcher.py", description="Tandem: local speculative decoding.")
    sub = parser.add_subparsers(dest="command")
    from app.offload import add_gpu_args

    ui = sub.add_parser("ui", help="start the app (the default)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=7860, help="first port to try (the next free one is used)")
    ui.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    ui.add_argument("--auth", help="user:password, required for a --host other than loopback")
    ui.add_argument("--pair", help="catalog pair to load at start (default: the catalog's default)")
    add_gpu_args(ui)
    ui.set_defaults(func=_ui)

    setup = sub.add_parser("setup", help="fetch and derive the offline demo pairs, then exit")
    setup.add_argument("--pair", action="append",
                       help="pair id (repeatable; default: every offline pair not marked on_demand)")
    setup.set_defaults(func=_setup)

    from app import bench_cli

    bench_cli.register(sub)

    from app.models import cli as models_cli

    models_cli.register(sub)

    from app import tune_cli

    tune_cli.register(sub)

    test = sub.add_parser("test", help="run the test suite (arguments go to pytest)")
    test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    test.set_defaults(func=_test)
    return parser


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["ui", *argv]
    args = build_parser().parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def _setup(args: argparse.Namespace) -> int:
    from app.models.catalog import load
    from app.models.provision import FETCH_ERRORS, ensure_pair

    cat = load()
    for pid in args.pair or cat.setup_pairs():
        try:
            pair, target, draft = ensure_pair(pid, cat)
        except FETCH_ERRORS as exc:
            print(f"error: pair {pid}: {exc}", file=sys.stderr)
            return 1
        print(f"[tandem] pair {pair.id}: target {target.name}, draft {draft.name}")
    return 0


def _ui(args: argparse.Namespace) -> int:
    from app.ui.app import serve

    return serve(host=args.host, port=args.port, open_browser=not args.no_browser, auth=args.auth,
                 pair_id=args.pair, gpu_layers=(args.gpu_layers, args.draft_gpu_layers))


def _test(args: argparse.Namespace) -> int:
    """Fetch the demo models into the test cache, then run pytest on the suite."""
    from app.testing import test_home

    os.environ["TANDEM_HOME"] = str(test_home())  # never the user's own data dir
    print(f"[tandem] test data: {os.environ['TANDEM_HOME']}", flush=True)
    rc = _setup(argparse.Namespace(pair=None))
    if rc:
        return rc
    extra = [a for a in args.pytest_args if a != "--"]
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests"), *extra]
    return subprocess.call(cmd, cwd=ROOT)
