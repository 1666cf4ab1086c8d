"""The target architectures that record their layers' inputs (what an EAGLE-3 head reads), and why that list is
checked before anything is turned on: on another arch llama.cpp stops the whole process at the first decode."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from app.engine.llama import eagle3rows
from app.engine.llama.eagle3rows import LAYER_ROW_ARCHS, refusal
from support.tinyeagle3 import write_llama

ROOT = Path(__file__).resolve().parents[3]

# Turn on the input of layer 0 on a target's context and decode one token: a target whose graph records no layer
# inputs fails llama.cpp's GGML_ASSERT (llm_graph_result::set_outputs) and the process aborts.
CHILD = """
import sys
import llama_cpp as L
from app.engine.llama import eagle3rows
from app.engine.llama.backend import LoadOptions, Model
m = Model(sys.argv[1], LoadOptions(n_ctx=64))
eagle3rows.set_layer_inp(m.ctx, 0, True)
m.decode([m.tokenize("Hello")[-1]], ())
row = eagle3rows.get_layer_inp(m.ctx, 0)
print("recorded", row[0] == row[0])
"""


def test_eagle3_layer_row_archs_and_refusals():
    assert eagle3rows.BOUND  # this llama-cpp-python exports the layer-row functions under their mangled names
    assert {"llama", "qwen3", "gpt-oss"} <= LAYER_ROW_ARCHS and not {"gemma3", "qwen2", "qwen4exp"} & LAYER_ROW_ARCHS
    assert refusal("llama", 32, 4096, [2, 16, 29], 4096) is None
    assert "layer inputs of qwen2 targets" in refusal("qwen2", 28, 1536, [2, 14, 25], 1536)
    assert "reads layer 32, but the target has layers 0-31" in refusal("llama", 32, 4096, [2, 16, 32], 4096)
    assert "reads 3 target layers, this one 2" in refusal("llama", 32, 4096, [2, 16], 4096)
    assert "rows 5120 wide but the target's are 4096" in refusal("llama", 32, 4096, [2, 16, 29], 5120)


def test_eagle3_layer_rows_on_an_arch_without_them_abort_the_process(gemma_paths, smol_paths, tmp_path):
    """What the allow-list guards against, run in child processes: a Gemma-3 target dies with SIGABRT at its
    first decode once a layer input is turned on; the made-up Llama target records it."""
    bad = subprocess.run([sys.executable, "-c", CHILD, str(gemma_paths[0])], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert bad.returncode == -signal.SIGABRT and "layer input tensor is null" in bad.stderr
    good = subprocess.run([sys.executable, "-c", CHILD, str(write_llama(tmp_path / "llama.gguf", smol_paths[1]))],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert good.returncode == 0 and "recorded True" in good.stdout, good.stderr[-2000:]
