"""``launcher.py setup``: fetch and derive the offline demo pairs, then exit."""

from __future__ import annotations

import argparse

from app.models.catalog import load
from app.models.provision import ensure_pair


def register(sub: argparse._SubParsersAction) -> None:
    setup = sub.add_parser("setup", help="fetch and derive the offline demo pairs, then exit")
    setup.add_argument("--pair", action="append",
                       help="pair id (repeatable; default: every offline pair not marked on_demand)")
    setup.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cat = load()
    for pid in args.pair or cat.setup_pairs():
        pair, target, draft = ensure_pair(pid, cat)  # errors: one line through main's error path, exit 2
        print(f"[tandem] pair {pair.id}: target {target.name}, draft {draft.name}")
    return 0
