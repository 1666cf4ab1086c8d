"""The one base of every Tandem error: :class:`TandemError` (message, hint, HTTP status, code).

It lives in the engine because the engine imports nothing else from ``app`` and its own errors (a full
context, a refused rollback, an RPC worker gone) derive from it like every other package's. ``app.errors``
re-exports it with the one mapping to CLI lines and exit codes, UI messages and OpenAI error bodies: a front
end dispatches on this class and its fields, never on a class name or on the message's text.
"""

from __future__ import annotations

from typing import Optional


class TandemError(Exception):
    """An error Tandem expects and can explain: the message says what happened, ``hint`` what to do.

    Subclasses set the class attributes; an instance may override them by keyword. ``status`` and ``code``
    are what the OpenAI-compatible API answers with; ``title`` prefixes the UI's one-line message;
    ``param`` names the request field at fault, where there is one."""

    hint: str = ""  # what to do about it ("" when the message says it)
    status: int = 500  # HTTP status of the API's answer
    code: str = "internal_error"  # machine-readable, as OpenAI's error bodies carry it
    title: str = ""  # the UI's prefix ("Prompt too long")
    param: Optional[str] = None  # the request field at fault

    def __init__(self, message: str = "", *args: object, hint: Optional[str] = None, status: Optional[int] = None,
                 code: Optional[str] = None, param: Optional[str] = None):
        super().__init__(message, *args)
        if hint is not None:
            self.hint = hint
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        if param is not None:
            self.param = param

    @property
    def message(self) -> str:
        return str(self)


class BadInput(TandemError):
    """A value the user gave is wrong: an HTTP 400 with code ``invalid_value``."""

    status = 400
    code = "invalid_value"
