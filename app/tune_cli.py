"""``launcher.py tune …``: sweep drafts and K on this machine."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="find the fastest draft and K for a pair on this machine")
    p.set_defaults(func=lambda args: print("tune: not implemented yet") or 2)
