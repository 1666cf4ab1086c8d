"""The command line: ``launcher.py [command] [options]``; no command (or only options) starts the app (``ui``).

One module per command (``ui``, ``serve``, ``setup``, ``bench``, ``models``, ``tune``, ``worker``, ``test``),
each with ``register(subparsers)``; ``args`` holds what they share. This dispatcher parses, runs the command
and is the one error path: a known error (``app.errors``) prints one line and exits 2, a bug keeps its
traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from app.cli import bench, models, serve, setup, test, tune, ui, worker
from app.errors import EXIT_ERROR, cli_line

COMMANDS = (ui, serve, setup, bench, models, tune, worker, test)


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported like every other error: one ``error:`` line naming the command
    and the argument (``--help`` shows the usage), exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="launcher.py", description="Tandem: local speculative decoding.")
    sub = parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.register(sub)
    return parser


def _check_environment() -> None:
    """Numbers read from the environment later (at a split load, at serve start), checked before any work."""
    from app.engine import limits

    limits.env_number("TANDEM_RPC_TIMEOUT", 120.0, "rpc_timeout")
    limits.env_number("TANDEM_TEMPLATE_SECONDS", 10.0, "template_seconds")
    limits.env_number("TANDEM_MAX_BODY_MIB", 8.0, "body_mib")


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["ui", *argv]
    if argv[:1] == ["test"] and not {"-h", "--help"} & set(argv[1:2]):
        # everything after `test` goes to pytest as it is (argparse's REMAINDER refuses a leading `-k`)
        args = argparse.Namespace(func=test.run, pytest_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 2
    try:
        _check_environment()
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - known errors get one line; anything else is a bug: traceback
        line = cli_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return EXIT_ERROR
