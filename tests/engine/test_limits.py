"""Hostile input, part 3: the single values the command line and the environment hand over, checked by pure
functions with one clear line each (the command line prints it and exits 2)."""

from __future__ import annotations

import pytest

from app.engine import limits
from app.engine.llama.backend import LoadOptions

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost


@pytest.mark.parametrize("text, words", [
    ("70000", "port must be between 1 and 65535 (got 70000)"),
    ("0", "port must be between 1 and 65535 (got 0)"),
    ("http", "port must be an integer between 1 and 65535 (got 'http')"),
    ("9" * 400, "port must be between 1 and 65535 (got an integer of"),
])
def test_a_bad_port_is_one_line(text, words):
    with pytest.raises(limits.LimitError) as err:
        limits.port(text)
    assert str(err.value) == words or str(err.value).startswith(words)
    assert limits.port(" 8080 ") == 8080


def test_a_huge_run_id_is_one_line():
    with pytest.raises(limits.LimitError, match=r"run id must be between 1 and 9223372036854775807 \(got 99999"):
        limits.run_id("99999999999999999999999")
    with pytest.raises(limits.LimitError, match="run id must be an integer"):
        limits.run_id("x")
    assert limits.run_id("12") == 12


def test_a_bad_rpc_timeout_is_one_line(monkeypatch):
    for text, words in (("abc", "TANDEM_RPC_TIMEOUT must be a number above 0 and at most 86400 (got 'abc')"),
                        ("-1", "TANDEM_RPC_TIMEOUT must be above 0 and at most 86400 (got -1.0)"),
                        ("nan", "TANDEM_RPC_TIMEOUT must be above 0"), ("inf", "TANDEM_RPC_TIMEOUT must be above 0")):
        monkeypatch.setenv("TANDEM_RPC_TIMEOUT", text)
        with pytest.raises(limits.LimitError) as err:
            limits.env_number("TANDEM_RPC_TIMEOUT", 120.0, "rpc_timeout")
        assert str(err.value).startswith(words)
    monkeypatch.setenv("TANDEM_RPC_TIMEOUT", " 30 ")
    assert limits.env_number("TANDEM_RPC_TIMEOUT", 120.0, "rpc_timeout") == 30.0
    monkeypatch.delenv("TANDEM_RPC_TIMEOUT")
    assert limits.env_number("TANDEM_RPC_TIMEOUT", 120.0, "rpc_timeout") == 120.0


def test_a_split_target_reads_the_rpc_timeout_as_a_checked_value(monkeypatch, smol_paths):
    from app.engine.remote.split import SplitTarget

    monkeypatch.setenv("TANDEM_RPC_TIMEOUT", "abc")  # once: ValueError at import of the split module
    with pytest.raises(limits.LimitError, match="TANDEM_RPC_TIMEOUT must be a number"):
        SplitTarget(smol_paths[0], LoadOptions(n_ctx=256, n_gpu_layers=10, rpc=("127.0.0.1:1",)))
