"""The devices of this process's llama.cpp, read from ggml's device registry (through ctypes: llama-cpp-python
binds none of it): what a worker can lend, and whether there is a local GPU at all (``llama_supports_gpu_offload``
also says yes for a build that merely has the RPC backend)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import llama_cpp as L

from app.engine.llama.llamalog import quiet_logs


def _lib(name: str) -> ctypes.CDLL:
    """The copy of ``lib<name>`` that libllama itself uses. Wheels store the ``.so``/``.so.0`` symlinks as
    separate files, and a second copy would bring a second device registry that llama.cpp never sees."""
    import os

    import llama_cpp  # noqa: F401 - loads libllama and, with it, the libraries it links

    for soname in (f"lib{name}.so.0", f"lib{name}.0.dylib", f"lib{name}.dylib"):
        try:
            return ctypes.CDLL(soname, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    return ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / f"lib{name}.so"))


@lru_cache(maxsize=1)
def ggml() -> ctypes.CDLL:
    g = _lib("ggml")
    vp = ctypes.c_void_p
    for fn, args, res in (("ggml_backend_reg_by_name", [ctypes.c_char_p], vp),
                          ("ggml_backend_reg_get_proc_address", [vp, ctypes.c_char_p], vp),
                          ("ggml_backend_reg_dev_count", [vp], ctypes.c_size_t),
                          ("ggml_backend_reg_dev_get", [vp, ctypes.c_size_t], vp),
                          ("ggml_backend_device_register", [vp], None),
                          ("ggml_backend_dev_count", [], ctypes.c_size_t),
                          ("ggml_backend_dev_get", [ctypes.c_size_t], vp),
                          ("ggml_backend_dev_by_name", [ctypes.c_char_p], vp),
                          ("ggml_backend_dev_name", [vp], ctypes.c_char_p),
                          ("ggml_backend_dev_description", [vp], ctypes.c_char_p),
                          ("ggml_backend_dev_type", [vp], ctypes.c_int),
                          ("ggml_backend_dev_memory", [vp, ctypes.POINTER(ctypes.c_size_t),
                                                       ctypes.POINTER(ctypes.c_size_t)], None)):
        f = getattr(g, fn)
        f.argtypes, f.restype = args, res
    return g


@dataclass(frozen=True)
class LocalDevice:
    name: str
    description: str
    kind: str  # cpu, gpu, igpu, accel
    free: int
    total: int


_DEV_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def local_devices() -> list[LocalDevice]:
    """The devices of this process's llama.cpp (what a worker can serve)."""
    g = ggml()
    out = []
    for i in range(g.ggml_backend_dev_count()):
        dev = g.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(LocalDevice(g.ggml_backend_dev_name(dev).decode(), g.ggml_backend_dev_description(dev).decode(),
                               _DEV_TYPES.get(g.ggml_backend_dev_type(dev), "other"), free.value, total.value))
    return out


def local_gpu() -> bool:
    """Whether llama.cpp has a GPU of this machine (not an RPC worker's) to offload to."""
    return any(d.kind in ("gpu", "igpu") and not d.name.upper().startswith("RPC") for d in local_devices())


def gpu_offload_supported() -> bool:
    """Whether this llama.cpp build can put layers on a GPU of this machine (CUDA, Metal, Vulkan, …).
    ``llama_supports_gpu_offload`` alone also says yes for a CPU build that has the RPC backend."""
    quiet_logs()
    return bool(L.llama_supports_gpu_offload()) and local_gpu()


def active_backend() -> str:
    """'CUDA', 'Metal', 'Vulkan', … or 'CPU': what llama.cpp will run on."""
    if not gpu_offload_supported():
        return "CPU"
    info = L.llama_print_system_info().decode(errors="replace")
    for name in ("CUDA", "Metal", "Vulkan", "ROCm", "SYCL"):
        if name.upper() in info.upper():
            return name
    return "GPU"
