"""One error type and one mapping for every front end.

Every error Tandem expects derives from :class:`TandemError` (message, ``hint``, HTTP ``status``, ``code``).
The class is defined in ``app.engine.errors`` and re-exported here: the engine imports nothing else from
``app``, and its own errors need the base too. This module maps any exception, by that base class and its
fields (never by a class name or by the message's text), to:

- :func:`cli_line`: the command line's one line "what happened — what to do" (None: a bug, keep its traceback),
  with :data:`EXIT_ERROR` as its exit code;
- :func:`ui_message`: the one-line message the UI shows;
- :func:`api_error`: the OpenAI-compatible API's (HTTP status, error type, code).
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Optional

from app import paths
from app.engine.errors import BadInput, TandemError

__all__ = ["BadInput", "TandemError", "NoPairLoaded", "EXIT_ERROR", "cli_line", "ui_message", "api_error",
           "disk_full", "disk_full_line", "CONTEXT_FULL"]

EXIT_ERROR = 2  # the command line's exit code for a known error (argparse's for a bad argument)
SQLITE_FULL = 13  # sqlite3's result code for a full disk
# sqlite3_errstr(SQLITE_FULL): the one fixed text of sqlite's error, for an error raised without its code
SQLITE_FULL_TEXT = "database or disk is full"


class NoPairLoaded(TandemError):
    """A generation was asked for before a pair is loaded (or after its load failed)."""

    status, code = 503, "model_not_loaded"


def disk_full(exc: Optional[BaseException]) -> bool:
    """True when ``exc``, or an error it came from, says the disk (or quota) is full."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, TandemError) and exc.code == "disk_full":
            return True
        if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL
                                               or exc.args == (SQLITE_FULL_TEXT,)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def disk_full_line(exc: BaseException) -> str:
    """How every front end says that the disk is full (the command line's error line, the UI's message): what
    could not be written and what to do, in words — never an errno or sqlite's own text."""
    detail, seen = "", set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen and not detail:
        seen.add(id(cur))
        if isinstance(cur, TandemError) and cur.code == "disk_full":
            detail = f" ({_first_line(cur)})"  # our own words: what was needed, what is free
        elif isinstance(cur, OSError) and cur.filename:
            detail = f" (could not write {paths.final_name(cur.filename)})"
        cur = cur.__cause__ or cur.__context__
    return f"the disk is full{detail} — free some space in {_data_dir()} or on that disk, then try again"


def cli_line(exc: BaseException) -> Optional[str]:
    """"what happened — what to do" for a known error; None for a bug (it deserves its traceback)."""
    what = _first_line(exc)
    if disk_full(exc):
        return disk_full_line(exc)
    hint: Optional[str] = None
    if isinstance(exc, TandemError):
        hint = exc.hint
    elif isinstance(exc, sqlite3.DatabaseError):
        hint = "the history database in the data folder could not be used; check its disk and permissions"
    elif isinstance(exc, MemoryError):
        hint = "use a smaller model or context"
    elif isinstance(exc, OSError):
        name = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or what}{name} — check the path and its permissions"
    if hint is None:
        return None
    return f"{what} — {hint}" if hint else what


def _data_dir() -> str:
    try:
        return str(paths.home())
    except Exception:  # noqa: BLE001 - the data dir itself may be what failed
        return "the data folder"


def ui_message(exc: BaseException) -> str:
    """The one-line message the UI shows for ``exc`` (a known error: its message, titled where it has one)."""
    name = type(exc).__name__
    text = str(exc) or name
    if disk_full(exc):
        return disk_full_line(exc)
    if isinstance(exc, TandemError):
        return f"{exc.title}: {text}" if exc.title else text
    if type(exc) in (ValueError, RuntimeError):
        return text
    return f"{name}: {text}"


def api_error(exc: Optional[BaseException]) -> tuple[int, str, str]:
    """(HTTP status, OpenAI error type, code) for an error a generation ended with."""
    if isinstance(exc, TandemError):
        status, code = exc.status, exc.code
    elif type(exc) is ValueError:
        status, code = 400, "invalid_value"
    else:
        status, code = 500, "internal_error"
    return status, ("server_error" if status >= 500 else "invalid_request_error"), code
