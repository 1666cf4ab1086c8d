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
def smol_pair(smol_paths):
    """The demo pair loaded once for the session (2048-token context)."""
    pair = Pair.load(smol_paths[0], smol_paths[1], load_options(n_ctx=2048))
    yield pair
    pair.close()
