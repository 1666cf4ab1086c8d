"""llama.vim, the real plugin in a real vim, completing code from Tandem's ``/infill`` on Qwen2.5-Coder-0.5B.

The plugin (github.com/ggml-org/llama.vim at a1c8e6e40cb45df59b78add5b65d575386832465, ``autoload/llama.vim``) is
vendored unchanged in support/editors and driven by support/llama_vim on a pseudo-terminal. What it does, read
from its source: on opening a file it queues a chunk of it and, from a 1 s timer while in normal mode, sends it
as ``input_extra`` in an ``n_predict: 0`` request (``s:ring_update``: prefix, suffix and prompt empty,
``t_max_predict_ms: 1``, ``response_fields: [""]``) so the server reads it ahead; in insert mode every cursor
move sends ``/infill`` (``llama#fim``: the 256 lines above as ``input_prefix``, the typed part of the line as
``prompt``, the rest and 64 lines below as ``input_suffix``, ``n_indent`` = the line's indent, ``n_predict: 128``,
``top_k 40``, ``top_p 0.90``, ``samplers``, ``cache_prompt``, ``t_max_predict_ms: 250`` for the first request of
a position, ``response_fields`` with ``content``, ``timings/…``, ``truncated``, ``tokens_cached``), through curl
in a vim job; the reply is used only if it matches ``"content"\\s*:"`` (compact JSON) and parses
(``s:fim_on_response``); the suggestion shows as virtual text and Tab accepts it (``llama#fim_accept``).
The plugin is configured with the line docs/api.md gives ("Code completion in editors").
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import pytest

from support.asgi_record import Recorder
from support.llama_vim import ESC, TAB, VimSession, missing

ROOT = Path(__file__).resolve().parents[2]
WHY_NOT = missing()
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT)

CODE = "def fibonacci(n):\n    if n < 2:\n        return n\n\n\ndef main():\n    print(fibonacci(10))\n"
TYPED = "    return fib"  # typed on a new line after line 3 (the 0.5B completes it: test_editor_replays)


@pytest.fixture(scope="module")
def served(coder_pair):
    from support.api_inproc import Served

    api = Served(coder_pair, pair_id="demo-qwen-coder", wrap=Recorder)
    yield api
    api.close()


def docs_config(url: str) -> str:
    """docs/api.md's llama.vim line ("Code completion in editors"), as written but for the server's address."""
    lines = [ln.strip() for ln in (ROOT / "docs" / "api.md").read_text(encoding="utf-8").splitlines()
             if ln.strip().startswith("let g:llama_config")]
    assert len(lines) == 1 and "http://127.0.0.1:8080/" in lines[0], lines
    return lines[0].replace("http://127.0.0.1:8080/", url)


def infills(served) -> list[dict]:
    return [s.json() for s in served.app.seen("/infill") if s.status == 200]


def test_llama_vim_gets_a_suggestion_from_infill_and_tab_accepts_it(served, tmp_path):
    code = tmp_path / "fib.py"
    code.write_text(CODE, encoding="utf-8")
    vim = VimSession(docs_config(served.url), code, tmp_path)
    try:
        vim.wait_event("started", 60)
        # normal mode: the ring buffer's warm-up reads this file's chunk into the server ahead of the first request
        vim.wait("the warm-up request", lambda: any(r.get("n_predict") == 0 for r in infills(served)), 60)
        warm = next(r for r in infills(served) if r.get("n_predict") == 0)
        assert warm["input_extra"] and warm["input_extra"][0]["filename"] == "fib.py"

        vim.type("3Go" + TYPED)  # a new line below line 3, then the user types and pauses
        vim.wait_event("line " + TYPED, 30)
        vim.wait_event("shown", 300)
        n = len(vim.events())
        vim.type(TAB)
        vim.wait_event("line ", 30, after=n)  # the suggestion went into the buffer
        vim.type(ESC)
        time.sleep(0.5)  # vim tells Esc from the start of an escape sequence by waiting (ttimeoutlen)
        vim.type(":wq\r")
        vim.wait("vim to write the file and quit", lambda: vim.proc.poll() is not None, 60)
        assert vim.proc.returncode == 0, vim.report()
    finally:
        vim.close()

    lines = code.read_text(encoding="utf-8").split("\n")
    accepted = lines[3]
    assert accepted.startswith(TYPED) and len(accepted) > len(TYPED), vim.report()
    assert re.search(r"fibonacci\(n\s*-\s*1\)", accepted), accepted
    ast.parse("\n".join(lines))  # the file is still Python
    # (a request may also have gone out for the line half typed, had the keys reached vim in two reads)
    first = next(r for r in infills(served) if r.get("n_predict") and r["prompt"] == TYPED)
    assert first["prompt"] == TYPED and first["n_indent"] == 4 and first["t_max_predict_ms"] == 250
    assert first["input_prefix"] == "def fibonacci(n):\n    if n < 2:\n        return n\n"
    assert "content" in first["response_fields"] and json.dumps(first["samplers"]) == '["top_k", "top_p", "infill"]'
