"""What this machine has: CPU cores and RAM (psutil), GPUs with total and free memory through ggml's backend
device API (from the libggml that llama-cpp-python ships), ``nvidia-smi`` as a fallback, Apple unified memory.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from dataclasses import replace
from typing import Optional

import psutil

from app.models.fit import GIB, Device, Machine

DEV_CPU, DEV_GPU, DEV_IGPU, DEV_ACCEL = 0, 1, 2, 3


def ggml_devices() -> list[Device]:
    """GPU devices that ggml sees (``ggml_backend_dev_*``), with their free and total memory."""
    try:
        from llama_cpp import _ggml

        lib = _ggml.libggml
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_count.argtypes = []
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
            fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        lib.ggml_backend_dev_type.restype = ctypes.c_int
        lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_dev_memory.restype = None
        lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.POINTER(ctypes.c_size_t)]
    except (ImportError, AttributeError, OSError):
        return []
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = lib.ggml_backend_dev_type(dev)
        if kind not in (DEV_GPU, DEV_IGPU):
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        found.append(Device(
            name=(lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
            description=(lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
            total=int(total.value), free=int(free.value), kind="gpu" if kind == DEV_GPU else "igpu",
        ))
    return found


def parse_nvidia_smi(text: str) -> list[Device]:
    """Devices from ``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits``."""
    out = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.rsplit(",", 2)]
        if len(cells) != 3:
            continue
        try:
            total, free = int(float(cells[1])) << 20, int(float(cells[2])) << 20
        except ValueError:
            continue
        out.append(Device(name=cells[0], total=total, free=free, description="nvidia-smi"))
    return out


def nvidia_smi_devices() -> list[Device]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        proc = subprocess.run([exe, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() in ("arm64", "aarch64")


def detect() -> Machine:
    vm = psutil.virtual_memory()
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    gpus = ggml_devices() or nvidia_smi_devices()
    unified = is_apple_silicon() or (bool(gpus) and all(g.kind == "igpu" for g in gpus))
    if is_apple_silicon() and not gpus:
        # Metal's recommended working set is about three quarters of the unified memory.
        gpus = [Device("Apple GPU (unified memory)", total=vm.total * 3 // 4, free=vm.available * 3 // 4,
                       kind="igpu", description="estimated from system memory")]
    return Machine(cpu_cores=cores, ram_total=vm.total, ram_available=vm.available, gpus=tuple(gpus),
                   unified=unified)


def override(machine: Machine, vram_gib: Optional[float] = None, ram_gib: Optional[float] = None) -> Machine:
    """``machine`` with the user's figures: ``vram_gib`` (one GPU with that much free; 0 = no GPU) and/or
    ``ram_gib`` (RAM available), to give advice for another machine."""
    if vram_gib is not None:
        gpus = () if vram_gib <= 0 else (Device("GPU (given)", int(vram_gib * GIB), int(vram_gib * GIB)),)
        machine = replace(machine, gpus=gpus, unified=False, source="given")
    if ram_gib is not None:
        machine = replace(machine, ram_total=int(ram_gib * GIB), ram_available=int(ram_gib * GIB), source="given")
    return machine


def summary(machine: Machine) -> str:
    lines = [f"CPU: {machine.cpu_cores} cores; RAM: {machine.ram_available / GIB:.1f} GiB available of "
             f"{machine.ram_total / GIB:.1f} GiB" + (" (unified with the GPU)" if machine.unified else "")]
    for g in machine.gpus:
        lines.append(f"GPU {g.name} {g.description}: {g.free / GIB:.1f} GiB free of {g.total / GIB:.1f} GiB")
    if not machine.gpus:
        lines.append("GPU: none found (CPU only)")
    return "\n".join(lines)
