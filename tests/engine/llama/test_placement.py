"""Where llama.cpp put a model, read from the log of its load (``placement.py``): pure, on a recorded log."""

from __future__ import annotations

from app.engine.llama import placement


CUDA_LOG = """load_tensors: layer  29 assigned to device CUDA0, is_swa = 0
load_tensors: offloading output layer to GPU
load_tensors: offloading 29 repeating layers to GPU
load_tensors: offloaded 31/31 layers to GPU
load_tensors:   CPU_Mapped model buffer size =    36.00 MiB
load_tensors:        CUDA0 model buffer size =   477.13 MiB
llama_context:  CUDA_Host  output buffer size =     0.19 MiB
llama_kv_cache:      CUDA0 KV buffer size =    11.25 MiB
sched_reserve:      CUDA0 compute buffer size =    98.25 MiB
sched_reserve:  CUDA_Host compute buffer size =     5.00 MiB
~llama_context:      CUDA0 compute buffer size is  98.2520 MiB, matches expectation of  98.2520 MiB
"""


def test_placement_is_read_from_llama_cpp_s_load_log():
    p = placement.parse(CUDA_LOG, 30)
    assert (p.layers_gpu, p.layers_total) == (31, 31)
    assert p.by_device() == {"CPU": round(41.19 * 2**20), "CUDA0": round((477.13 + 11.25 + 98.25) * 2**20)}
    assert p.gpu_bytes == p.by_device()["CUDA0"] and len(p.buffers) == 6
    # without the summary line (a CPU build logs none), the layers assigned to a GPU are counted
    p = placement.parse("load_tensors: layer   0 assigned to device CUDA0, is_swa = 0\n"
                        "load_tensors: layer   1 assigned to device CPU, is_swa = 0\n", 2)
    assert (p.layers_gpu, p.layers_total, p.by_device()) == (1, 3, {})
