#!/usr/bin/env python3
"""Tandem's entry point: ``python launcher.py`` starts the app; ``python launcher.py test`` runs the tests.

This file uses only the standard library. On first run it creates a virtual environment next to it (or at
``$TANDEM_VENV``), installs Tandem and its dependencies there (building llama-cpp-python for CUDA, Metal or
the CPU), then re-runs itself inside it. Everything after that lives in ``app.cli``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("TANDEM_VENV", ROOT / ".venv")).resolve()
# Every build has llama.cpp's RPC backend (the `worker` command and --rpc: a target split over machines).
RPC = "-DGGML_RPC=ON"
BACKEND_FLAGS = {"cuda": f"-DGGML_CUDA=on {RPC}", "metal": f"-DGGML_METAL=on {RPC}", "cpu": RPC}
LLAMA_CPP = "llama-cpp-python==0.3.36"


def cache_dir() -> Path:
    """The user cache dir (as platformdirs would say), for built wheels that outlive a clone."""
    if os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "tandem"


def say(message: str) -> None:
    print(f"[tandem setup] {message}", flush=True)


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV


def nvidia_gpu() -> bool:
    """An NVIDIA driver with at least one GPU (a toolkit alone, e.g. in a container without a GPU, is not
    enough to run a CUDA build)."""
    if Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def choose_backend() -> tuple[str, str]:
    """(backend, why): forced by TANDEM_BACKEND, else CUDA if an NVIDIA GPU and the CUDA toolkit are both
    present, Metal on Apple Silicon, CPU otherwise."""
    forced = os.environ.get("TANDEM_BACKEND", "").strip().lower()
    if forced:
        if forced not in BACKEND_FLAGS:
            sys.exit(f"TANDEM_BACKEND must be one of {', '.join(BACKEND_FLAGS)}, not {forced!r}")
        return forced, "forced by TANDEM_BACKEND"
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "metal", "Apple Silicon"
    nvcc = shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()
    gpu = nvidia_gpu()
    if gpu and nvcc:
        return "cuda", "found an NVIDIA GPU and the CUDA toolkit (nvcc)"
    if gpu:
        return "cpu", "an NVIDIA GPU but no CUDA toolkit (nvcc) to build with: install it for GPU speed"
    if nvcc:
        return "cpu", "the CUDA toolkit is installed but no NVIDIA GPU is visible"
    return "cpu", "no GPU found"


def wanted_stamp(extras: str, backend: str) -> str:
    h = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    flags = os.environ.get("CMAKE_ARGS", BACKEND_FLAGS[backend])
    h.update(f"|{extras}|{backend}|{flags}|{sys.version_info[:2]}".encode())
    return h.hexdigest()


def ensure_environment(extras: str) -> None:
    """Create the venv and install what the project needs, unless the stamp says it is already there."""
    backend, why = choose_backend()
    def stamp_file(have: str) -> Path:
        return VENV / f".tandem-stamp-{have or 'app'}"

    # The app alone is also satisfied by an install that included the test extras.
    for have in ([extras, "test"] if not extras else [extras]):
        if stamp_file(have).exists() and stamp_file(have).read_text() == wanted_stamp(have, backend):
            return
    stamp = wanted_stamp(extras, backend)
    if not venv_python().exists():
        create_venv()
    env = dict(os.environ)
    if "CMAKE_ARGS" not in os.environ and BACKEND_FLAGS[backend]:
        env["CMAKE_ARGS"] = BACKEND_FLAGS[backend]
    say(f"llama.cpp backend: {backend} ({why}); CMAKE_ARGS={env.get('CMAKE_ARGS', '')!r}")
    say("installing dependencies (the first llama-cpp-python build takes a few minutes)")
    try:
        wheels = ensure_llama_wheel(backend, env)
    except subprocess.CalledProcessError:
        if backend == "cpu":
            raise
        say(f"the {backend} build of llama-cpp-python failed (see above); falling back to the CPU build. "
            "Set TANDEM_BACKEND=cpu to skip the attempt, or fix the toolkit and delete the venv to retry.")
        backend, env = "cpu", dict(env, CMAKE_ARGS=BACKEND_FLAGS["cpu"])
        wheels = ensure_llama_wheel(backend, env)
    pip = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", "--find-links", str(wheels)]
    # replace a build with other flags that may already be installed (same version: pip would keep it)
    subprocess.run(pip + ["--force-reinstall", "--no-deps", LLAMA_CPP], check=True, env=env)
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    subprocess.run(pip + ["-e", target], check=True, env=env)
    stamp_file(extras).write_text(stamp)
    say("environment ready")


def create_venv() -> None:
    say(f"creating a virtual environment in {VENV}")
    if subprocess.run([sys.executable, "-m", "venv", str(VENV)]).returncode == 0 and venv_python().exists():
        return
    # Some Linux distributions ship Python without the venv module's pip (python3-venv); pip can fetch
    # virtualenv instead.
    say("the venv module is not usable here; trying virtualenv through pip")
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--quiet", "virtualenv"], check=True)
    subprocess.run([sys.executable, "-m", "virtualenv", str(VENV)], check=True)


def have_compiler() -> bool:
    return any(shutil.which(c) for c in ("c++", "g++", "clang++", "cl"))


def ensure_llama_wheel(backend: str, env: dict) -> Path:
    """Build llama-cpp-python once per backend (and CMAKE_ARGS) into the user cache dir; later installs,
    fresh clones included, take the wheel from there in seconds. pip's own cache cannot do this: it does not
    keep wheels built from local index files, and it does not know CMAKE_ARGS."""
    flags = hashlib.sha256(env.get("CMAKE_ARGS", "").encode()).hexdigest()[:8]
    wheels = cache_dir() / "wheels" / f"{backend}-{flags}"
    if not list(wheels.glob("llama_cpp_python-0.3.36-*.whl")):
        if not have_compiler():
            sys.exit("llama-cpp-python is built from source and needs a C++ compiler: install one "
                     "(Debian/Ubuntu: apt install build-essential; macOS: xcode-select --install; "
                     "Windows: Visual Studio Build Tools) and run this again.")
        say(f"building {LLAMA_CPP} for {backend} once (a few minutes; cached in {wheels})")
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(venv_python()), "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
                        "--no-cache-dir", "-w", str(wheels), LLAMA_CPP], check=True, env=env)
    return wheels


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):
        sys.exit("Tandem needs Python 3.10 or newer")
    if not in_venv():
        ensure_environment("test" if argv[:1] == ["test"] else "")
        if os.name == "nt":
            return subprocess.call([str(venv_python()), str(Path(__file__).resolve()), *argv])
        os.execv(str(venv_python()), [str(venv_python()), str(Path(__file__).resolve()), *argv])
    if argv[:1] == ["test"]:
        ensure_environment("test")  # `test` after the app was set up without the test extras
    sys.path.insert(0, str(ROOT))
    from app.cli import main as app_main

    return app_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
