"""Shared fixtures: the real demo models (fetched once into the test cache) loaded with the real llama.cpp."""

from __future__ import annotations

import os

from app.testing import test_home

if not os.environ.get("TANDEM_HOME"):
    os.environ["TANDEM_HOME"] = str(test_home())
os.environ.setdefault("TANDEM_QUIET", "1")

import pytest  # noqa: E402

from app.testing import load_options  # noqa: E402
from app.engine.pair import Pair  # noqa: E402
from app.models.provision import ensure_pair  # noqa: E402


@pytest.fixture(scope="session")
def smol_paths():
    """(target F32, draft Q4_1) paths of the demo-smollm2 pair."""
    _, target, draft = ensure_pair("demo-smollm2")
    return target, draft


@pytest.fixture(scope="session")
def gemma_paths():
    """(target F32, draft Q4_K_M) paths of the demo-gemma3 pair."""
    _, target, draft = ensure_pair("demo-gemma3")
    return target, draft


@pytest.fixture(scope="session")
def coder_path():
    """Qwen2.5-Coder-0.5B (490 MB, fetched once into the test cache): the code model whose vocabulary has FIM
    tokens and whose template knows tools, Hermes style."""
    from app.models import catalog, provision

    return provision.ensure_model(catalog.load(), "qwen25-coder-05b-instruct-q4_k_m")


@pytest.fixture(scope="session")
def coder_pair(coder_path):
    """The code model alone (no draft model: lookup drafts), 4096-token context, loaded once for the session."""
    pair = Pair.load(coder_path, None, load_options(n_ctx=4096))
    yield pair
    pair.close()


@pytest.fixture(scope="session")
def smol_pair(smol_paths):
    """The demo pair loaded once for the session (2048-token context)."""
    pair = Pair.load(smol_paths[0], smol_paths[1], load_options(n_ctx=2048))
    yield pair
    pair.close()


# --- tiers: every test is in exactly one, so `pytest -m unit` (seconds) or `-m "not browser"` runs a part ----
TIERS = ("unit", "models", "processes", "browser")
_MODEL_FIXTURES = {"smol_paths", "gemma_paths", "smol_pair", "api", "coder_path", "coder_pair"}
_PROCESS_WORDS = ("subprocess", "Popen", "ui_server", "uvicorn", "api_inproc", "multiprocessing")
_PROCESS_DIRS = ("server", "ui")
_sources: dict = {}


def _tier(item) -> str:
    """browser (a marker), processes (starts a server or a child process), models (loads the demo models or
    fetches a pair), else unit."""
    if item.get_closest_marker("browser"):
        return "browser"
    path = item.path
    if path not in _sources:
        _sources[path] = path.read_text(encoding="utf-8") if path.suffix == ".py" else ""
    text, parts = _sources[path], path.parts
    if any(d in parts[-2:-1] for d in _PROCESS_DIRS) or any(w in text for w in _PROCESS_WORDS):
        return "processes"
    if _MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) or "ensure_pair" in text:
        return "models"
    return "unit"


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, _tier(item)))
