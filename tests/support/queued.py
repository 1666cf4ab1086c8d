"""A request sent while another one generates, in a thread: what it got back (an answer, an HTTP status, or
"closed"), for the shutdown tests."""

from __future__ import annotations

import threading


def ask_in_thread(client, messages: list, max_tokens: int = 8) -> tuple[threading.Thread, dict]:
    """Start the request; ``join`` the thread, then read ``answer`` or ``status`` from the dict."""
    import openai

    got: dict = {}

    def ask() -> None:
        try:
            got["answer"] = client.chat.completions.create(model="", messages=messages,  # "": the loaded pair
                                                           max_tokens=max_tokens)
        except openai.APIStatusError as exc:
            got["status"] = exc.status_code
        except openai.APIConnectionError:
            got["status"] = "closed"

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, got
