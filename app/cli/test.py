"""``launcher.py test [pytest arguments]``: fetch the demo models into the test cache, then run the suite."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from app.cli import setup
from app.models import catalog, provision
from app.testing import test_home

ROOT = Path(__file__).resolve().parents[2]
FIM_MODEL = "qwen25-coder-05b-instruct-q4_k_m"


def register(sub: argparse._SubParsersAction) -> None:
    test = sub.add_parser("test", help="run the test suite (arguments go to pytest)")
    test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    test.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    os.environ["TANDEM_HOME"] = str(test_home())  # never the user's own data dir
    print(f"[tandem] test data: {os.environ['TANDEM_HOME']}", flush=True)
    rc = setup.run(argparse.Namespace(pair=None))
    if rc:
        return rc
    # The one code model of the offline catalog (490 MB): the fill-in-the-middle and Hermes tool-call tests
    # need a vocabulary and a template trained for them, which the demo pairs' models lack.
    fim = provision.ensure_model(catalog.load(), FIM_MODEL)
    print(f"[tandem] fill-in-the-middle model: {fim.name}", flush=True)
    # From the project root pytest searches pyproject's testpaths (tests/) unless test files or folders are
    # named: `test tests/engine -x` runs that folder only.
    extra = [a for a in args.pytest_args if a != "--"]
    # The slowest tests are named at the end, so a slow suite says where its time goes.
    durations = [] if any(a.startswith("--durations") for a in extra) else ["--durations=15"]
    return subprocess.call([sys.executable, "-m", "pytest", *durations, *extra], cwd=ROOT)
