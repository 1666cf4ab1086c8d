"""What holds llama.cpp memory closes once (``lifetime.py``), on a real model: ``closed`` until loaded and after
``close``, ``with`` closes, and a second close does nothing."""

from __future__ import annotations

from app.engine.llama.backend import Model
from app.engine.llama.lifetime import Closable
from app.testing import load_options


def test_with_closes_once(smol_paths):
    assert Closable().closed  # nothing loaded: nothing held
    with Model(smol_paths[1], load_options(n_ctx=128)) as model:
        assert isinstance(model, Closable) and not model.closed
        model.sync([1, 2, 3])
    assert model.closed
    model.close()  # freed once: a second close does nothing
    assert model.closed
