"""One number formatter for tables and status lines (CLI, reports, UI): a dash where there is no value."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, spec: str = ".2f", suffix: str = "", none: str = "-") -> str:
    """``value`` formatted with ``spec`` and ``suffix``; ``none`` for None; other non-numbers as text."""
    if value is None:
        return none
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:{spec}}{suffix}"
    return str(value)
