"""The recipes of docs/api.md ("Recipes: Open WebUI in Docker, Continue in an editor"), as written: ``serve``
started with the command line the page gives for Open WebUI in Docker (on a free port), then the requests Open
WebUI and Continue make, with the real ``openai`` client: the model list with the key, a streamed chat completion,
and the ``Host`` header a container sends (``host.docker.internal``)."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import sys
import time
import urllib.request

import pytest

from app.service.ports import ephemeral_port
from support.ui_server import ARTIFACTS, ROOT, _stop

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

README = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")  # where the recipes are documented


def recipe_line(prefix: str) -> list[str]:
    """The page's command line that starts with ``prefix`` (a code block line), as argv."""
    lines = [ln.strip() for ln in README.splitlines() if ln.strip().startswith(prefix)]
    assert len(lines) == 1, (prefix, lines)
    return shlex.split(lines[0])


def readme_value(pattern: str) -> str:
    found = re.search(pattern, README)
    assert found, pattern
    return found.group(1)


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


@pytest.fixture(scope="module")
def docker_recipe():
    """``serve`` exactly as the Open WebUI recipe starts it, on a free port and with a fresh key."""
    argv = recipe_line("python launcher.py serve --host 0.0.0.0")
    readme_key = argv[argv.index("--api-key") + 1]
    assert readme_value(r"OPENAI_API_KEY=(\S+)") == readme_key  # the container is given the same key
    port, key = ephemeral_port(), "k" + secrets.token_urlsafe(16)  # never a leading "-" (argparse reads it as a flag)
    argv = with_flag(with_flag(argv, "--port", str(port)), "--api-key", key)
    assert argv[:2] == ["python", "launcher.py"]
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "serve-recipe.log", "w")
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), *argv[2:]], cwd=ROOT,
                            env=dict(os.environ, TANDEM_QUIET="1"), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, (ARTIFACTS / "serve-recipe.log").read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "serve did not answer"
        time.sleep(0.3)
    yield port, key
    _stop(proc, log)


def chat_stream(client) -> tuple[str, list]:
    chunks = list(client.chat.completions.create(
        model="demo-smollm2", messages=[{"role": "user", "content": "Name three fruits."}], max_tokens=16,
        stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_open_webui_in_docker_lists_the_pair_and_streams_a_reply(docker_recipe):
    port, key = docker_recipe
    base = readme_value(r"OPENAI_API_BASE_URL=(\S+)")
    assert base == "http://host.docker.internal:8080/v1"
    host = f"host.docker.internal:{port}"  # what the container's requests carry (the recipe's port here)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, default_headers={"Host": host})
    models = [m.id for m in client.models.list()]
    assert models[0] == "demo-smollm2", models  # the loaded pair first
    text, chunks = chat_stream(client)
    assert text.strip() and chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].model_extra["stats"]["tokens_per_second"] > 0

    no_key = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Host": host})
    assert no_key.status_code == 401 and no_key.json()["error"]["message"]  # the key is the check
    wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-the-key")
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_continue_config_talks_to_the_same_server(docker_recipe):
    port, key = docker_recipe
    block = README[README.index("**Continue**"):]
    block = block[block.index("```yaml") + 7:block.index("```", block.index("```yaml") + 7)]
    config = {k.strip(): v.strip() for k, v in re.findall(r"^\s*-?\s*(\w+):\s*(\S.*)$", block, re.M)}
    assert config["provider"] == "openai" and config["schema"] == "v1"
    assert config["apiBase"] == "http://127.0.0.1:8080/v1" and config["apiKey"] == "my-secret-key"
    client = openai.OpenAI(base_url=config["apiBase"].replace("8080", str(port)), api_key=key)
    assert config["model"] in [m.id for m in client.models.list()]
    reply = client.chat.completions.create(model=config["model"], max_tokens=8,
                                           messages=[{"role": "user", "content": "Say hi."}])
    assert reply.choices[0].message.content.strip()
    text, _ = chat_stream(client)
    assert text.strip()


def test_the_app_serves_the_same_recipe_on_its_own_port():
    """The app's line of the recipe: UI and /v1 beyond loopback, the container's Host header, the key."""
    argv = recipe_line("python launcher.py --no-browser --host 0.0.0.0")
    assert readme_value(r"OPENAI_API_BASE_URL=(http://host.docker.internal:7860/v1)")
    port, key = ephemeral_port(), "k" + secrets.token_urlsafe(16)  # never a leading "-" (argparse reads it as a flag)
    argv = with_flag(with_flag(argv, "--port", str(port)), "--api-key", key)
    log = open(ARTIFACTS / "app-recipe.log", "w")
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), *argv[2:]], cwd=ROOT,
                            env=dict(os.environ, TANDEM_QUIET="1"), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while "under /v1" not in (ARTIFACTS / "app-recipe.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (ARTIFACTS / "app-recipe.log").read_text()
            time.sleep(0.5)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key,
                               default_headers={"Host": f"host.docker.internal:{port}"})
        assert [m.id for m in client.models.list()][0] == "demo-smollm2"
        text, _ = chat_stream(client)
        assert text.strip()
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
    finally:
        _stop(proc, log)
