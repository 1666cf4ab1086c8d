"""Command line: ``launcher.py [ui options]`` starts the app; subcommands give the same features headless."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from app.errors import EXIT_ERROR, cli_line

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("ui", "serve", "setup", "bench", "models", "tune", "worker", "test")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launcher.py", description="Tandem: local speculative decoding.")
    sub = parser.add_subparsers(dest="command")
    from app.models.offload import add_gpu_args

    ui = sub.add_parser("ui", help="start the app (the default)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=7860, help="first port to try (the next free one is used)")
    ui.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    ui.add_argument("--auth", help="user:password, required for a --host other than loopback")
    ui.add_argument("--pair", help="catalog pair to load at start (default: the catalog's default)")
    ui.add_argument("--api-key", help="Bearer key for the OpenAI-compatible /v1 routes (needed beyond loopback)")
    add_gpu_args(ui)
    ui.set_defaults(func=_ui)

    serve = sub.add_parser("serve", help="the OpenAI-compatible API alone (no UI), e.g. for editors and scripts")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8080)
    serve.add_argument("--api-key", help="Bearer key required on every /v1 route (needed beyond loopback)")
    serve.add_argument("--pair", help="catalog pair to load at start (default: the catalog's default)")
    serve.add_argument("--overhead", type=_positive, metavar="N", help="instead of serving: time N rounds of direct "
                       "engine runs against the same requests through the server, print the overhead, exit")
    serve.add_argument("--max-tokens", type=_positive, default=128, help="tokens per run for --overhead")
    add_gpu_args(serve)
    serve.set_defaults(func=_serve)

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

    from app import worker_cli

    worker_cli.register(sub)

    test = sub.add_parser("test", help="run the test suite (arguments go to pytest)")
    test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    test.set_defaults(func=_test)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {value}")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, not {value}")
    return value


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["ui", *argv]
    if argv[:1] == ["test"] and not {"-h", "--help"} & set(argv[1:2]):
        # everything after `test` goes to pytest as it is (argparse's REMAINDER refuses a leading `-k`)
        args = argparse.Namespace(func=_test, pytest_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - known errors get one line; anything else is a bug: traceback
        line = cli_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return EXIT_ERROR


def _setup(args: argparse.Namespace) -> int:
    from app.models.catalog import load
    from app.models.provision import ensure_pair

    cat = load()
    for pid in args.pair or cat.setup_pairs():
        pair, target, draft = ensure_pair(pid, cat)  # errors: one line through main's error path, exit 2
        print(f"[tandem] pair {pair.id}: target {target.name}, draft {draft.name}")
    return 0


def _ui(args: argparse.Namespace) -> int:
    from app.ui.app import serve

    return serve(host=args.host, port=args.port, open_browser=not args.no_browser, auth=args.auth,
                 pair_id=args.pair, api_key=args.api_key,
                 gpu_layers=(args.gpu_layers, args.draft_gpu_layers), rpc=args.rpc)


def _serve(args: argparse.Namespace) -> int:
    if args.overhead is not None:
        from app.server.overhead import main as overhead

        return overhead(rounds=args.overhead, max_tokens=args.max_tokens, pair_id=args.pair)
    from app.server.serve import serve_api

    return serve_api(host=args.host, port=args.port, api_key=args.api_key, pair_id=args.pair,
                     gpu_layers=(args.gpu_layers, args.draft_gpu_layers), rpc=args.rpc)


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
