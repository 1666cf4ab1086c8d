"""Hostile chat templates: one that loops, one that renders 100 MB, one that doubles a string until memory runs
out, one that recurses. Each is one clear error within its limit, and the process that asked lives on with its
memory as it was (once: ``serve`` at 100 % CPU for ever, the whole app ended by std::bad_alloc). Each runs in a
child Python with a timeout, so that a regression fails here instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.decoding.text import TEMPLATE_CHARS, TemplateError, render_chat
from support.chat_template import HUGE, LOOPS, RECURSES

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

ROOT = Path(__file__).resolve().parents[3]
DOUBLES = ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
           "{{ ns.s | length }}")
ASKER = """
import json, resource, sys, time
from app.engine.decoding.text import TemplateError, render_chat
t0 = time.monotonic()
try:
    out = {"text": len(render_chat(sys.argv[1], [{"role": "user", "content": "Hello"}]))}
except TemplateError as exc:
    out = {"error": str(exc)}
out["seconds"] = time.monotonic() - t0
out["after"] = render_chat("{{ messages[0].content }}!", [{"role": "user", "content": "Hello"}])
try:  # this address space's own peak: ru_maxrss keeps the parent's peak across exec (pytest's, late in a run)
    out["maxrss_mib"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
except OSError:
    out["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def ask(template: str, seconds: float) -> dict:
    """``template`` rendered by a child Python whose template limit is ``seconds``: its error (or the length of
    its text), how long it took, a render after it, and the asking process's peak memory."""
    env = dict(os.environ, TANDEM_TEMPLATE_SECONDS=str(seconds), PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run([sys.executable, "-c", ASKER, template], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=seconds + 120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the render was not stopped within {seconds} s")  # once: for ever
    assert proc.returncode == 0, proc.stderr[-3000:]  # once: std::bad_alloc ended the process
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_looping_template_is_stopped_at_the_time_limit():
    out = ask(LOOPS, 2)
    assert out["error"] == "the chat template took more than 2 s to render (the limit, TANDEM_TEMPLATE_SECONDS)"
    assert out["after"] == "Hello!"  # a fresh renderer answers the next one


def test_a_template_rendering_100_mb_is_refused_at_the_character_limit():
    out = ask(HUGE, 30)
    assert out["error"] == f"the chat template renders more than {TEMPLATE_CHARS} characters (the limit)"
    assert out["after"] == "Hello!"
    assert out["maxrss_mib"] < 400  # the output was never held by the asking process


def test_a_template_that_grows_a_string_without_end_is_stopped():
    out = ask(DOUBLES, 30)  # 2^40 characters: the renderer's memory limit (or its time limit) ends it
    assert out["error"] in ("the chat template needs more than 1024 MiB (the limit)",
                            "the chat template took more than 30 s to render (the limit, TANDEM_TEMPLATE_SECONDS)")
    assert out["after"] == "Hello!" and out["maxrss_mib"] < 400


def test_a_recursive_template_and_a_huge_product_are_one_error_each():
    for template, words in ((RECURSES, "the chat template recurses without end"),
                            ("{{ 'x' * 10 ** 9 }}", f"builds a value of more than {TEMPLATE_CHARS} characters")):
        with pytest.raises(TemplateError, match=words):
            render_chat(template, [{"role": "user", "content": "Hello"}])


def test_the_sandbox_still_holds_and_templates_still_work():
    msgs = [{"role": "user", "content": "caf\u00e9 \U0001f600 \ud800"}, {"role": "assistant", "content": "ok"}]
    with pytest.raises(TemplateError, match="chat template"):
        render_chat("{{ cycler.__init__.__globals__.os }}", msgs)
    with pytest.raises(TemplateError, match="chat template: no tools here"):
        render_chat("{{ raise_exception('no tools here') }}", msgs)
    text = render_chat("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ tools | tojson }}",
                       msgs, tools=[{"type": "function", "function": {"name": "f\u00fc"}}])
    assert text == '[user]caf\u00e9 \U0001f600 \ud800[assistant]ok[{"type": "function", "function": {"name": "f\u00fc"}}]'
    assert json.loads(text[text.index("[{"):]) == [{"type": "function", "function": {"name": "f\u00fc"}}]
