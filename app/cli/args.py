"""What the commands share: argument types that report a bad value in one line, the GPU-layer and RPC
arguments, loading a pair with its GPU report printed, the reproduce line, and :func:`fail` (the one error
path: a known error raised here reaches the dispatcher, which prints it in one line and exits 2)."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Optional, Union

from app.engine import limits
from app.engine.pair import Pair
from app.engine.remote.rpc import parse_endpoints
from app.errors import BadInput
from app.models import offload
from app.service.loading import PairOptions, load_pair as _load_pair


class UsageError(BadInput):
    """The command line asks for something that cannot be done; the message says what instead."""


def fail(message: str) -> NoReturn:
    """End the command with ``error: message`` and exit code 2 (through the dispatcher's error path)."""
    raise UsageError(message)


def _typed(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=`` that turns a ValueError into argparse's one-line error."""
    def typed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = name  # argparse names the type in its messages
    return typed


def limit(name: str, range_name: Optional[str] = None) -> Callable[[str], Any]:
    """Parse and check one value against its documented range (``engine.limits``)."""
    return _typed(name, lambda text: limits.parse_number(name, text, range_name))


k_value = _typed("k", lambda text: limits.k_setting(text, text=True))  # a draft length: an integer in range or auto


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {value}")
    return value


def port(text: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 1 to 65535, not {text!r}")
    return int(text)


def add_gpu_args(parser: argparse.ArgumentParser) -> None:
    """``--gpu-layers/-ngl`` and ``--draft-gpu-layers/-ngld``, both ``auto`` by default, and ``--rpc`` (for any
    command that loads a pair: bench, tune, ui, serve)."""
    layers = _typed("layers", offload.layers_value)
    parser.add_argument("--gpu-layers", "-ngl", type=layers, default=offload.AUTO, metavar="N|all|auto",
                        help="target layers on the GPU (default auto: as many as the fit estimate says fit "
                             "beside the draft; 0 without a GPU)")
    parser.add_argument("--draft-gpu-layers", "-ngld", type=layers, default=offload.AUTO, metavar="N|all|auto",
                        help="draft layers on the GPU (default auto: all of them when they fit; the draft goes "
                             "on the GPU first)")
    parser.add_argument("--rpc", type=_typed("endpoints", parse_endpoints), default=(),
                        metavar="HOST:PORT[,HOST:PORT]",
                        help="split the target over these RPC workers (`launcher.py worker` on each) and this "
                             "machine; --gpu-layers then counts the layers on the workers and local GPUs together")


def load(target: Union[str, Path], draft: Optional[Union[str, Path]], args: argparse.Namespace,
         tag: str) -> tuple[Pair, dict]:
    """Load the pair with the GPU layers, context and threads of ``args`` (``gpu_layers``,
    ``draft_gpu_layers``, ``ctx``, ``threads``, ``rpc``), saying what was chosen and what was placed.
    Returns (pair, gpu report)."""
    def say(line: str) -> None:
        print(f"[{tag}] {line}", flush=True)

    options = PairOptions(target, draft, (args.gpu_layers, args.draft_gpu_layers), args.ctx, args.threads,
                          tuple(getattr(args, "rpc", ())))
    pair, choice = _load_pair(options, say)
    report = offload.gpu_report(pair.target, pair.draft, choice)
    for line in offload.report_lines(report):
        say(line)
    return pair, report


def reproduce_command(argv: list[str]) -> str:
    """The command line that runs this again."""
    args = argv[1:] if argv and argv[0].endswith("launcher.py") else argv
    return "python launcher.py " + " ".join(shlex.quote(a) for a in args if a)


@contextlib.contextmanager
def ctrl_c_cancels(tag: str) -> Iterator[threading.Event]:
    """A cancel switch that a first Ctrl-C sets (a sweep stops after its current run and keeps what it measured)
    and a second turns into KeyboardInterrupt; the previous handler comes back after. Off the main thread, where
    signals cannot be handled, the switch is only the caller's."""
    cancel = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield cancel
        return

    def on_sigint(signum, frame):
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print(f"\n[{tag}] cancelling after the current run (Ctrl-C again to abort)", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)


def add_guard_args(parser: argparse.ArgumentParser) -> None:
    """The API key (flag, file or TANDEM_API_KEY) and the request guard's allow-list and body limit."""
    parser.add_argument("--api-key", help="Bearer key required on every /v1 route (needed beyond loopback); "
                        "visible to other local users: prefer --api-key-file or TANDEM_API_KEY")
    parser.add_argument("--api-key-file", type=Path, help="read the API key from this file (first line)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a web origin allowed to call the API, e.g. https://example.org (repeatable; '*' any; "
                        "also TANDEM_ALLOW_ORIGINS, comma separated)")
    parser.add_argument("--max-body-mib", type=limit("max-body-mib", "body_mib"), help="largest request body in MiB (default 8; also TANDEM_MAX_BODY_MIB)")


def add_cache_arg(parser: argparse.ArgumentParser) -> None:
    """``--cache-ram MiB``: the prompt cache's budget (llama.cpp server's option of that name)."""
    parser.add_argument("--cache-ram", type=limit("cache-ram", "cache_ram"), metavar="MiB",
                        help="keep several conversations' prompt states in this much RAM, so that switching between "
                             "them does not read their prompts again (default 8192, never more than half the free "
                             "RAM; 0 turns it off)")


def api_key(args: argparse.Namespace) -> Optional[str]:
    """--api-key, else the first line of --api-key-file, else TANDEM_API_KEY (None: no key)."""
    import os

    if args.api_key is not None:  # spaces around it could never match: a client's header value is trimmed
        if not str(args.api_key).strip():
            fail("--api-key is blank: give a key that is not only spaces, or leave the option out")
        return str(args.api_key).strip()
    if args.api_key_file is not None:
        try:
            key = args.api_key_file.read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read the API key file {args.api_key_file}: {getattr(exc, 'strerror', None) or exc}")
        if not key or not key[0].strip():
            fail(f"the API key file {args.api_key_file} is empty")
        return key[0].strip()
    return os.environ.get("TANDEM_API_KEY", "").strip() or None
