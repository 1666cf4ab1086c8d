"""llama.cpp's log: silent unless ``TANDEM_LLAMA_LOG=1``, and recorded while a model loads (``placement``
reads where the layers went from it) or a grammar is parsed (its complaint), one recording at a time.
Outside a recording its errors still reach stderr: llama.cpp prints them just before it aborts the process
(a CUDA error, say), and without them the user would see only the abort's one line."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from typing import Iterator, Optional

import llama_cpp as L

_init_lock = threading.Lock()
_initialised = False
_load_lock = threading.Lock()  # one recording at a time, so that the log recorded is that load's
_load_log: Optional[list] = None  # llama.cpp's log while a recording runs
ERROR, CONT = 4, 5  # GGML_LOG_LEVEL_ERROR and GGML_LOG_LEVEL_CONT (a line continuing the one before)
_in_error = False  # the last line logged was an error (a CONT line after it belongs to it)


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _silent_log(level, text, user_data):  # pragma: no cover - called from C
    log_line(level, text.decode(errors="replace"))


def log_line(level: int, line: str) -> None:
    """One line of llama.cpp's log: recorded while a recording runs, shown with ``TANDEM_LLAMA_LOG=1``, and
    an error (with its continuation lines) shown on stderr otherwise."""
    global _in_error
    _in_error = level == ERROR or (level == CONT and _in_error)
    if _load_log is not None:
        _load_log.append(line)
    if os.environ.get("TANDEM_LLAMA_LOG") == "1":
        print(line, end="", flush=True)
    elif _in_error and _load_log is None:
        print(f"llama.cpp: {line}" if level == ERROR else line, end="", file=sys.stderr, flush=True)


def quiet_logs() -> None:
    """Route llama.cpp's log to nowhere (``TANDEM_LLAMA_LOG=1`` shows it) and initialise the backend once."""
    global _initialised
    with _init_lock:
        if not _initialised:
            L.llama_log_set(_silent_log, ctypes.c_void_p(0))
            L.llama_backend_init()
            _initialised = True


@contextlib.contextmanager
def recorded_log() -> Iterator[list[str]]:
    """Record llama.cpp's log while the block runs (e.g. a grammar parser's complaint), one recording at a
    time (loads record theirs the same way)."""
    global _load_log
    quiet_logs()
    with _load_lock:
        L.llama_log_set(_silent_log, ctypes.c_void_p(0))  # ours again, should anything have replaced it
        lines: list[str] = []
        _load_log = lines
        try:
            yield lines
        finally:
            _load_log = None
