"""Where llama.cpp put a model, read from the log of its load (``placement.py``), and each buffer's device: host,
GPU or RPC worker. Pure, on recorded and made-up logs."""

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


def test_buffers_are_counted_on_their_device_host_gpu_or_rpc_worker():
    assert [placement.device_of(b) for b in ("CUDA0", "CUDA0_Split", "Vulkan1", "CPU_Mapped", "CPU_REPACK",
                                             "CUDA_Host", "RPC0[10.0.0.2:50052]")] == \
        ["CUDA0", "CUDA0", "Vulkan1", "CPU", "CPU", "CPU", "RPC0[10.0.0.2:50052]"]
    log = ("load_tensors: offloaded 20/31 layers to GPU\n"
           "load_tensors:   CPU_Mapped model buffer size =    10.00 MiB\n"
           "load_tensors: RPC0[10.0.0.2:50052] model buffer size =    30.00 MiB\n"
           "llama_kv_cache:        CUDA0 KV buffer size =     2.00 MiB\n")
    p = placement.parse(log, 30)
    mib = 2**20
    assert (p.layers_gpu, p.host_bytes, p.gpu_bytes, p.remote_bytes) == (20, 10 * mib, 2 * mib, 30 * mib)
    assert p.to_dict()["bytes"] == {"CPU": 10 * mib, "RPC0[10.0.0.2:50052]": 30 * mib, "CUDA0": 2 * mib}
    assert p.to_dict()["buffers"][1] == {"type": "RPC0[10.0.0.2:50052]", "kind": "model", "bytes": 30 * mib}
