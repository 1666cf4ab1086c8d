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


def cuda_graphs_guard(env=os.environ) -> bool:
    """Turn llama.cpp's CUDA graphs off (``GGML_CUDA_DISABLE_GRAPHS``, read at the first graph a context
    computes) unless the user chose: ``TANDEM_CUDA_GRAPHS=1`` keeps them, and a ``GGML_CUDA_DISABLE_GRAPHS``
    already set is left as it is. Returns whether graphs stay on.

    Measured on an H100 (CUDA 13.0, the vendored llama.cpp of llama-cpp-python 0.3.36): with graphs on, every
    benchmark over the edit prompts aborted the process with "CUDA error: an illegal instruction was
    encountered" (6 of 6 commands, the draft model loaded or not, with and without VMM), while a plain
    generation loop on the same prompts did not; with graphs off every command completed. Graphs make a plain
    step of the 135M demo target 1.08 ms instead of 1.64 ms, but an abort takes the app and its API with it.
    Without a CUDA build the variable is never read."""
    if env.get("TANDEM_CUDA_GRAPHS") == "1" or "GGML_CUDA_DISABLE_GRAPHS" in env:
        return env.get("GGML_CUDA_DISABLE_GRAPHS") is None
    env["GGML_CUDA_DISABLE_GRAPHS"] = "1"
    return False


def quiet_logs() -> None:
    """Route llama.cpp's log to nowhere (``TANDEM_LLAMA_LOG=1`` shows it) and initialise the backend once
    (with CUDA graphs off unless the user keeps them: :func:`cuda_graphs_guard`)."""
    global _initialised
    with _init_lock:
        if not _initialised:
            cuda_graphs_guard()
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
