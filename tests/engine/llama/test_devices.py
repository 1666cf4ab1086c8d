"""The devices of this process's llama.cpp (``devices.py``), read through ctypes from the registry libllama itself
uses: this machine's CPU with its memory, and one answer to "is there a local GPU" (on a GPU run,
``TANDEM_TEST_GPU_LAYERS``, yes)."""

from __future__ import annotations

from app.engine.llama import devices
from app.testing import gpu_layers


def test_the_registry_lists_this_machines_cpu_with_its_memory():
    found = devices.local_devices()
    names = [d.name for d in found]
    assert len(set(names)) == len(names) and {d.kind for d in found} <= {"cpu", "gpu", "igpu", "accel", "other"}
    cpu = next(d for d in found if d.kind == "cpu")
    assert cpu.name == "CPU" and 0 < cpu.free <= cpu.total
    assert devices.ggml().ggml_backend_dev_by_name(b"CPU")  # the same registry, looked up by name


def test_the_gpu_answers_agree():
    local = any(d.kind in ("gpu", "igpu") and not d.name.upper().startswith("RPC") for d in devices.local_devices())
    assert devices.local_gpu() == local
    offload = devices.gpu_offload_supported()
    assert not offload or local  # a CPU build with the RPC backend does not count as a GPU
    assert (devices.active_backend() == "CPU") == (not offload)
    if gpu_layers() != 0:
        assert offload and devices.active_backend() != "CPU"
