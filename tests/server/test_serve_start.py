"""Hostile model files at start: ``serve`` whose pair's target ships a chat template that loops, or one that
renders nothing. It refuses to start with one line naming the file (and the limit) and exit code 2, and never
listens: the API cannot load another pair, so serving none would only answer 503 for ever. Once: ``serve`` sat
at 100 % CPU and never listened, or listened with ``/health`` saying ok while every chat failed. The real
``launcher.py serve`` in a child process, on a data folder of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.models import fileops
from app.models.provision import ensure_pair
from app.service.ports import ephemeral_port, port_is_free
from support.chat_template import LOOPS, NOTHING, with_template

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

ROOT = Path(__file__).resolve().parents[2]


def home_with(tmp_path: Path, template: str) -> Path:
    """A data folder whose demo pair is present: the draft the real one, the target a copy of the draft with
    ``template`` (both marked verified, so nothing is fetched)."""
    _, target, draft = ensure_pair("demo-smollm2")
    models = tmp_path / "home" / "models"
    models.mkdir(parents=True)
    (models / draft.name).symlink_to(draft)
    with_template(draft, models / target.name, template)
    for path in (models / draft.name, models / target.name):
        fileops.mark_done(path, "0" * 64)
    return tmp_path / "home"


@pytest.mark.parametrize("template, words", [
    (LOOPS, "the chat template took more than 2 s to render (the limit, TANDEM_TEMPLATE_SECONDS)"),
    (NOTHING, "the chat template renders nothing"),
], ids=["loops", "nothing"])
def test_serve_refuses_to_start_on_a_pair_whose_template_fails(tmp_path, template, words):
    home = home_with(tmp_path, template)
    port = ephemeral_port()
    env = dict(os.environ, TANDEM_HOME=str(home), TANDEM_TEMPLATE_SECONDS="2", TANDEM_QUIET="1")
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "serve", "--port", str(port), "-ngl", "0",
                               "-ngld", "0"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("serve neither started nor refused within 300 s")  # once: 100 % CPU for ever
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and "SmolLM2-135M-Instruct.F32.gguf: " in errors[0] and words in errors[0], errors
    assert "OpenAI-compatible API on" not in proc.stdout and port_is_free("127.0.0.1", port)
