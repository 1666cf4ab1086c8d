"""A target split over llama.cpp RPC workers: two real workers on 127.0.0.1 (CPU backend), the demo target
split over them and this process, greedy output equal to the local-only output with speculation on and off;
and the errors a user meets (unreachable, busy, wrong version, a worker gone mid-generation)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app.engine.remote import rpc
from app.engine.llama.backend import LoadOptions
from app.engine.loop import GenConfig, generate, run
from app.engine.pair import Pair
from app.engine.llama.placement import HOST, device_of, is_remote
from app.models import fit

from support.greedy import assert_bench_greedy

ROOT = Path(__file__).resolve().parents[3]
PROMPT = "The three primary colours are"
GEN = 24


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(port: int) -> subprocess.Popen:
    """``launcher.py worker`` (one thread: three llama.cpp processes share this machine's cores)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "worker", "--port", str(port),
                             "--threads", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not rpc.alive(f"127.0.0.1:{port}", 0.5):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"worker on {port} did not start: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def workers():
    if not rpc.supported():
        pytest.fail("this llama.cpp build has no RPC backend: the launcher builds with -DGGML_RPC=ON")
    ports = [free_port(), free_port()]
    procs = [start_worker(p) for p in ports]
    yield tuple(f"127.0.0.1:{p}" for p in ports)
    for p in procs:
        stop(p)


def greedy(pair: Pair, speculative: bool) -> list[int]:
    pair.reset()
    cfg = GenConfig(max_tokens=GEN, speculative=speculative, k=4)
    prompt = pair.target.tokenize(PROMPT)
    tokens, _ = run(pair.target, prompt, cfg, pair.proposer(cfg) if speculative else None)
    return tokens


def test_split_target_decodes_like_the_local_one(workers, smol_paths):
    target, draft = smol_paths
    local = Pair.load(target, draft, LoadOptions(n_ctx=512))
    try:
        expected = greedy(local, speculative=False)
        assert greedy(local, speculative=True) == expected
    finally:
        local.close()
    # 20 of the 31 units on the workers, 10 each; 11 stay in this machine's RAM; the draft stays local.
    split = Pair.load(target, draft, LoadOptions(n_ctx=512, n_gpu_layers=20, rpc=workers,
                                                 tensor_split=(1.0, 1.0)), LoadOptions(n_ctx=512))
    try:
        placed = split.target.placement()
        by_dev = placed.by_device()
        assert placed.layers_gpu == 20 and by_dev.get("CPU", 0) > 0
        for endpoint in workers:
            assert by_dev.get(f"RPC0[{endpoint}]", 0) > 0 or any(endpoint in d for d in by_dev), by_dev
        # no weights on this machine's GPU (a CUDA build keeps a compute buffer there even so)
        local_gpu = [(dev, n) for dev, kind, n in placed.buffers
                     if kind == "model" and device_of(dev) != HOST and not is_remote(device_of(dev))]
        assert placed.remote_bytes > 0 and not local_gpu, local_gpu
        assert split.draft.options.rpc == () and split.draft.placement().remote_bytes == 0
        assert greedy(split, speculative=False) == expected
        assert greedy(split, speculative=True) == expected
        split.target.reset()  # more logits rows than the shared memory holds come through the pipe
        rows = split.target.decode(list(range(100, 130)), list(range(30)))
        assert rows.shape == (30, split.target.n_vocab) and bool(np.isfinite(rows).all())
    finally:
        split.close()


def test_bench_reports_split_against_local(workers, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def square(x):"}\n')
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "bench", "--pair", "demo-smollm2", "--rpc",
                           ",".join(workers), "--gpu-layers", "20", "--k", "4", "--max-tokens", "16",
                           "--prompts-file", str(prompts), "--reference", "local", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "this machine alone: plain" in proc.stdout and "split / local" in proc.stdout
    assert f"--rpc {','.join(workers)}" in proc.stdout  # the command that reproduces it
    import json

    result = json.loads(out.read_text())
    ref = result["reference"]
    assert ref["kind"] == "local" and ref["tps"] > 0 and ref["plain_tps"] > 0 and ref["plain_ratio"] > 0
    assert_bench_greedy(result["identical"], result["mismatches"])
    row = result["per_prompt"][0]
    assert row["reference_plain_tps"] > 0 and row["reference_plain_ratio"] > 0
    target = result["gpu"]["target"]
    assert target["rpc"] == list(workers) and target["used_remote_bytes"] > 0


def test_worker_gone_mid_generation_fails_cleanly(smol_paths):
    port = free_port()
    worker = start_worker(port)
    endpoint = f"127.0.0.1:{port}"
    target, draft = smol_paths
    pair = Pair.load(target, draft, LoadOptions(n_ctx=512, n_gpu_layers=10, rpc=(endpoint,)), LoadOptions(n_ctx=512))
    try:
        cfg = GenConfig(max_tokens=64, k=2)
        events = generate(pair.target, pair.target.tokenize(PROMPT), cfg, pair.proposer(cfg))
        next(events)  # the first token is out: the split works
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        with pytest.raises(rpc.WorkerLost, match=f"RPC worker {endpoint} is gone.*reload"):
            for _ in events:
                pass
        with pytest.raises(rpc.WorkerLost):  # the lost split refuses further work with the same reason
            pair.target.decode([1])
    finally:
        pair.close()  # closing a lost split is fine too
    # This process is unharmed: the same models load and generate locally.
    local = Pair.load(target, draft, LoadOptions(n_ctx=512))
    try:
        assert len(greedy(local, speculative=True)) == GEN
    finally:
        local.close()


def test_unreachable_worker_is_named_before_loading(smol_paths):
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(rpc.WorkerUnreachable, match=f"{endpoint} is unreachable.*launcher.py worker"):
        Pair.load(smol_paths[0], smol_paths[1], LoadOptions(n_ctx=512, n_gpu_layers=10, rpc=(endpoint,)))


def fake_server(reply: bytes | None) -> tuple[str, threading.Event]:
    """A port that answers the RPC HELLO with ``reply`` (None: accepts and never answers)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    done = threading.Event()

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(1 + 8 + rpc.CAPS_SIZE)
            if reply is not None:
                conn.sendall(struct.pack("<Q", len(reply)) + reply)
            done.wait(10)
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", done


def test_version_mismatch_and_busy_worker_are_clear():
    old, done = fake_server(bytes([6, 0, 0, 0]) + bytes(rpc.CAPS_SIZE))  # an older llama.cpp's worker
    with pytest.raises(rpc.VersionMismatch, match="protocol 6.0.0 but this llama.cpp speaks 7.0.0"):
        rpc.probe(old)
    done.set()
    busy, done = fake_server(None)
    with pytest.raises(rpc.WorkerBusy, match="one client at a time"):
        rpc.probe(busy, timeout=1.0)
    done.set()


def test_endpoints_are_checked():
    assert rpc.parse_endpoints(" 10.0.0.2:50052, 10.0.0.3:50052,10.0.0.2:50052") == ("10.0.0.2:50052",
                                                                                     "10.0.0.3:50052")
    for bad in ("10.0.0.2", ":50052", "host:0", "host:99999", "host:port"):
        with pytest.raises(ValueError):
            rpc.parse_endpoints(bad)
    with pytest.raises(ValueError, match="at most 16"):
        rpc.parse_endpoints(",".join(f"h:{p}" for p in range(1, 18)))


def test_worker_command_errors_are_one_line():
    port = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen(1)
        proc = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "worker", "--port", str(port)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "bench", "--pair", "demo-smollm2", "--rpc",
                           f"127.0.0.1:{free_port()}", "--max-tokens", "8"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert proc.returncode == 2 and "is unreachable" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def _shape(n_layers: int = 30) -> fit.ModelShape:
    return fit.ModelShape("t", weights=31 * 100 * fit.GIB // 100, n_layers=n_layers, n_embd=576, n_head_kv=3,
                          head_dim_k=64, head_dim_v=64, n_vocab=49152)


def test_fit_spreads_the_target_over_workers():
    gpu = fit.Device("GPU0", 8 * fit.GIB, 8 * fit.GIB)
    workers = (fit.Device("a:1#0", 24 * fit.GIB, 12 * fit.GIB, "rpc", "a:1"),
               fit.Device("b:1#0", 24 * fit.GIB, 9 * fit.GIB, "rpc", "b:1"))
    m = fit.Machine(cpu_cores=8, ram_total=64 * fit.GIB, ram_available=48 * fit.GIB, gpus=(gpu,), remote=workers)
    auto = fit.choose_layers(_shape(), None, m, fit.Settings(ctx=512))
    local = auto.split[-1]
    assert 0 < local < 31 and len(auto.split) == 3  # the local GPU first, then the workers in order
    assert auto.split[0] >= auto.split[1] and auto.target_layers == sum(auto.split) <= 31
    assert auto.remote_bytes > 0 and auto.target_gpu_bytes <= auto.budget
    given = fit.choose_layers(_shape(), None, fit.Machine(8, 64 * fit.GIB, 48 * fit.GIB, remote=workers[:1] * 2),
                              fit.Settings(ctx=512), want_target=20)
    assert given.split == (10, 10) and given.target_layers == 20 and given.target_gpu_bytes == 0


def test_pair_settings_check_and_load_a_split(workers, smol_paths):
    from app.service.loading import PairOptions, load_into
    from app.service.state import AppState
    from app.ui.tabs import pair as pair_tab

    html = pair_tab.workers_html(", ".join(workers))
    assert "Ready" in html and all(e in html for e in workers) and "GiB free" in html
    assert "unreachable" in pair_tab.workers_html(f"127.0.0.1:{free_port()}")
    assert "host:port" in pair_tab.workers_html("no-port-here")
    state = AppState(target_options=LoadOptions(n_ctx=512))  # no workers until the load names them
    try:
        line = load_into(state, PairOptions(*smol_paths, (20, "auto"), 512, rpc=workers))
        assert "10 on " + workers[0] in line and "10 on " + workers[1] in line and "11 on this machine" in line
        assert state.pair.target.options.rpc == workers and state.target_options.rpc == workers
        info = pair_tab.info_html(state)
        assert "RPC worker" in info and "RPC workers" in info  # the devices lent, and the bytes placed there
        # Loading again over the same workers lets go of them first (a worker serves one client at a time).
        load_into(state, PairOptions(*smol_paths, (20, "auto"), 512))
        assert state.pair.target.placement().remote_bytes > 0
    finally:
        state.unload()
