"""Where llama.cpp actually put a model: layers on the GPU and buffer bytes per device.

llama-cpp-python's C API has no query for this (``llama_model::memory_breakdown`` is C++ only), but llama.cpp
logs every decision while it loads a model and creates its context: ``offloaded 31/31 layers to GPU`` (GPU
builds only), ``layer 7 assigned to device CUDA0``, and one ``<buffer type> model|KV|compute|output buffer size =
N MiB`` line per buffer. ``backend.Model`` records the log of its own load and this module reads it (pure).

Buffer types name their device: ``CUDA0``, ``Vulkan1``, ``MTL0`` are GPU memory; ``CPU``, ``CPU_Mapped`` (the
mmapped file), ``CPU_REPACK`` and the pinned ``*_Host`` buffers are host memory, reported as ``CPU``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20
HOST = "CPU"
_BUFFER = re.compile(r"^\S*:\s+(\S+)\s+(model|KV|RS|compute|output) buffer size =\s*([\d.]+) MiB", re.M)
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_ASSIGNED = re.compile(r"layer\s+\d+ assigned to device (\S+?),")


@dataclass(frozen=True)
class Placement:
    layers_gpu: int  # units offloaded, counted as llama.cpp's -ngl counts them (repeating layers + output)
    layers_total: int  # n_layer + 1
    buffers: tuple[tuple[str, str, int], ...] = ()  # (buffer type, kind: model/KV/RS/compute/output, bytes)

    def by_device(self) -> dict[str, int]:
        """Bytes per device, host buffers under ``CPU``."""
        out: dict[str, int] = {}
        for buft, _, n in self.buffers:
            dev = device_of(buft)
            out[dev] = out.get(dev, 0) + n
        return out

    @property
    def gpu_bytes(self) -> int:
        """Bytes on this machine's GPUs (not on RPC workers)."""
        return sum(n for dev, n in self.by_device().items() if dev != HOST and not is_remote(dev))

    @property
    def remote_bytes(self) -> int:
        """Bytes on RPC workers' devices (``RPC0[host:port]``)."""
        return sum(n for dev, n in self.by_device().items() if is_remote(dev))

    @property
    def host_bytes(self) -> int:
        return self.by_device().get(HOST, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"layers_gpu": self.layers_gpu, "layers_total": self.layers_total, "bytes": self.by_device(),
                "gpu_bytes": self.gpu_bytes, "host_bytes": self.host_bytes, "remote_bytes": self.remote_bytes,
                "buffers": [{"type": b, "kind": k, "bytes": n} for b, k, n in self.buffers]}


def is_remote(device: str) -> bool:
    return device.startswith("RPC") and "[" in device


def device_of(buffer_type: str) -> str:
    """``CUDA0`` for ``CUDA0``/``CUDA0_Split``; ``CPU`` for ``CPU``, ``CPU_Mapped``, ``CPU_REPACK``, ``CUDA_Host``."""
    if buffer_type.upper().startswith("CPU") or buffer_type.endswith("_Host"):
        return HOST
    if is_remote(buffer_type):
        return buffer_type
    return buffer_type.split("_")[0]


def parse(log: str, n_layer: int) -> Placement:
    """The placement described by the log of one model load + context creation."""
    buffers = tuple((m.group(1), m.group(2), round(float(m.group(3)) * MIB)) for m in _BUFFER.finditer(log))
    total = n_layer + 1
    found = _OFFLOADED.findall(log)
    if found:
        return Placement(int(found[-1][0]), int(found[-1][1]), buffers)
    # No summary line (a CPU build logs none): count the repeating layers assigned to a device (the output
    # layer is not listed, so it is taken to stay on the host).
    on_gpu = sum(1 for dev in _ASSIGNED.findall(log) if device_of(dev) != HOST)
    return Placement(on_gpu, total, buffers)
