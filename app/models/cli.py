"""``launcher.py models …``: the model manager from the command line."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, pull, import, check, fit, recommend and derive models")
    p.set_defaults(func=lambda args: print("models: not implemented yet") or 2)
