"""llama.cpp's log: quiet, but its errors reach stderr (they come just before an abort such as a CUDA error),
and a recording (a load, a grammar) keeps what it records to itself."""

from __future__ import annotations

from app.engine.llama import llamalog
from app.engine.llama.llamalog import CONT, ERROR, cuda_graphs_guard, log_line, recorded_log

INFO = 2


def test_errors_and_their_continuations_reach_stderr_info_does_not(capsys, monkeypatch):
    monkeypatch.delenv("TANDEM_LLAMA_LOG", raising=False)
    log_line(INFO, "load_tensors: offloading 30 layers\n")
    log_line(CONT, ".")
    log_line(ERROR, "CUDA error: an illegal memory access was encountered\n")
    log_line(CONT, "  current device: 0, in function ggml_backend_cuda_synchronize\n")
    log_line(INFO, "next\n")
    log_line(CONT, "more info\n")
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == ("llama.cpp: CUDA error: an illegal memory access was encountered\n"
                       "  current device: 0, in function ggml_backend_cuda_synchronize\n")


def test_a_recording_keeps_its_errors(capsys, monkeypatch):
    monkeypatch.delenv("TANDEM_LLAMA_LOG", raising=False)
    with recorded_log() as lines:
        log_line(ERROR, "parse: error parsing grammar\n")
    assert lines == ["parse: error parsing grammar\n"] and capsys.readouterr().err == ""
    assert llamalog._load_log is None


def test_cuda_graphs_are_off_unless_the_user_keeps_them():
    env: dict = {}
    assert cuda_graphs_guard(env) is False and env == {"GGML_CUDA_DISABLE_GRAPHS": "1"}
    env = {"TANDEM_CUDA_GRAPHS": "1"}
    assert cuda_graphs_guard(env) is True and "GGML_CUDA_DISABLE_GRAPHS" not in env
    env = {"GGML_CUDA_DISABLE_GRAPHS": "0"}  # the user's own setting (llama.cpp reads any value as "off")
    assert cuda_graphs_guard(env) is False and env == {"GGML_CUDA_DISABLE_GRAPHS": "0"}
