"""Chat templates rendered in a child process, within a time, an output and a memory limit.

A chat template is a small program that comes inside the model file. Jinja's sandbox keeps it away from Python's
internals, but not from looping for ever or from building a huge string, and neither can be stopped from inside
the process that runs it: a loop of ``range(100000)`` inside another held ``serve`` at 100 % CPU before it ever
listened, and a template that rendered 100 MB ended the whole app. Here the template runs in a child process the
app can kill, so each bound holds whatever the template does:

* time: the app waits ``seconds`` for the answer (``TANDEM_TEMPLATE_SECONDS``, default 10), then kills the child
  (the next render starts a fresh one); the child also ends itself on an alarm should the app be gone;
* output: the child counts the characters as the template produces them and stops past ``chars``;
* memory: the child's address space is capped at ``MEMORY`` (on Linux, where ``RLIMIT_AS`` holds).

One child per process, started at the first render, answering one render at a time (an ordinary one takes
milliseconds). The request and the answer are single JSON lines: nothing a template could shape is unpickled.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from app.engine.errors import BadInput

MEMORY = 1 << 30  # bytes of address space for the child: an ordinary render needs a few MiB
SECONDS_ENV = "TANDEM_TEMPLATE_SECONDS"


class TemplateError(BadInput, ValueError):
    hint = "the model's chat template failed; use a completion prompt"


# --- the child -------------------------------------------------------------------------------------------

def _sandbox(chars: int) -> Any:
    """Jinja's immutable sandbox, with ``*`` refusing to build a sequence longer than ``chars`` at once (a clear
    error instead of a failed allocation) and the globals chat templates expect."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > chars:
                    raise TemplateError(f"the chat template builds a value of more than {chars} characters "
                                        "(the limit)")
            return super().call_binop(context, operator, left, right)

    def raise_exception(message: str) -> None:
        raise TemplateError(f"chat template: {message}")

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, loader=jinja2.BaseLoader())
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    env.filters["tojson"] = _tojson
    return env


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """``tojson`` as chat templates expect it (Hugging Face's: plain JSON, not Jinja's HTML-escaped one)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=8)
def _compiled(template: str, chars: int) -> Any:
    """A template compiled once (a process renders the few templates of its loaded models, each many times)."""
    return _sandbox(chars).from_string(template)


def sandbox_render(template: str, variables: dict, chars: int) -> str:
    """``template`` rendered with ``variables`` in the sandbox, stopping once the output passes ``chars``
    characters (counted as the template produces it, so a huge output is never held whole)."""
    import jinja2

    out: list[str] = []
    n = 0
    try:
        for piece in _compiled(template, chars).generate(**variables):
            n += len(piece)
            if n > chars:
                raise TemplateError(f"the chat template renders more than {chars} characters (the limit)")
            out.append(piece)
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed to render: {exc}") from exc
    except RecursionError:
        raise TemplateError("the chat template recurses without end") from None
    except MemoryError:
        raise TemplateError(f"the chat template needs more than {MEMORY >> 20} MiB (the limit)") from None
    return "".join(out)


def _answer(request: dict) -> dict:
    try:
        return {"text": sandbox_render(request["template"], request["variables"], request["chars"])}
    except TemplateError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - whatever a template does, its render gets one line
        return {"error": f"chat template failed to render: {type(exc).__name__}: {exc}"}


def main() -> int:
    """The child: one JSON request a line on stdin, one JSON answer a line on stdout, until stdin closes."""
    if sys.platform.startswith("linux"):
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    alarm = None
    if os.name != "nt":
        import signal

        alarm = signal.alarm  # its default action ends the process, even inside a long C call
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while line := stdin.readline():
        request = json.loads(line)
        if alarm is not None:
            alarm(math.ceil(request["seconds"]) + 5)  # the app kills it first; this is for an app gone
        answer = _answer(request)
        if alarm is not None:
            alarm(0)
        stdout.write(json.dumps(answer).encode() + b"\n")
        stdout.flush()
    return 0


# --- the app's side -------------------------------------------------------------------------------------

class TemplateBox:
    """The child process and the lock that gives it one render at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._pid = os.getpid()  # a forked copy of this process starts a child of its own

    def render(self, template: str, variables: dict, seconds: float, chars: int) -> str:
        """``template`` rendered with ``variables`` (JSON values) within ``seconds`` and ``chars``; TemplateError
        says which limit it passed, or why it failed."""
        request = json.dumps({"template": template, "variables": variables, "chars": chars, "seconds": seconds},
                             default=str).encode() + b"\n"  # ASCII: a lone surrogate in a message travels too
        with self._lock:
            proc = self._child()
            late = threading.Event()

            def kill() -> None:
                late.set()
                proc.kill()

            timer = threading.Timer(seconds, kill)
            timer.daemon = True
            timer.start()
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(request)
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                line = b""
            finally:
                timer.cancel()
            if late.is_set() or not line:
                self._reap()
        if not line:
            if late.is_set():
                raise TemplateError(f"the chat template took more than {seconds:g} s to render (the limit, "
                                    f"{SECONDS_ENV})")
            raise TemplateError(f"the chat template ended its renderer (more than {MEMORY >> 20} MiB, or a crash)")
        answer = json.loads(line)
        if "error" in answer:
            raise TemplateError(str(answer["error"]))
        text = str(answer["text"])
        if len(text) > chars:  # (the child stops first; this holds should it not)
            raise TemplateError(f"the chat template renders more than {chars} characters (the limit)")
        return text

    def _child(self) -> subprocess.Popen:
        if self._pid != os.getpid():
            self._proc, self._pid = None, os.getpid()
        if self._proc is None or self._proc.poll() is not None:
            root = str(Path(__file__).resolve().parents[3])
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
            try:
                self._proc = subprocess.Popen([sys.executable, "-m", "app.engine.decoding.templatebox"],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            except OSError as exc:
                raise TemplateError(f"could not start the chat template's renderer: {exc}") from None
        return self._proc

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()

    def close(self) -> None:
        with self._lock:
            self._reap()


if __name__ == "__main__":
    sys.exit(main())
