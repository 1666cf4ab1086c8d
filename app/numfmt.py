"""One number formatter for tables and status lines (CLI, reports, UI): a dash where there is no value; and one
way to write a draft length K."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, spec: str = ".2f", suffix: str = "", none: str = "-") -> str:
    """``value`` formatted with ``spec`` and ``suffix``; ``none`` for None; other non-numbers as text."""
    if value is None:
        return none
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:{spec}}{suffix}"
    return str(value)


def k_text(k: Any, mean_k: float | None = None, p_min: float | None = None) -> str:
    """A draft length as every table and line writes it: ``4``, ``auto``, ``auto (p_min 0.2)``, ``auto, mean 7.3``."""
    if str(k) != "auto":
        return str(k)
    if p_min is not None:
        return f"auto (p_min {p_min:g})"
    return f"auto, mean {mean_k:.1f}" if mean_k else "auto"
