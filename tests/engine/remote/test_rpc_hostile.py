"""Hostile input, part 3: RPC. A fake worker on 127.0.0.1 that speaks the protocol's first messages but
answers with counts and sizes no llama.cpp worker sends, one that goes silent, and the real ``launcher.py
worker`` given a device that does not exist; then hostile clients of a real worker: a 9-byte header declaring
1 GiB, a message that stops half-way, a client that connects and says nothing."""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from app.engine.remote import rpc

pytestmark = pytest.mark.hostile  # bad input, a hostile file or a fault: one clear error, nothing lost

ROOT = Path(__file__).resolve().parents[3]


def fake_worker(count: int = 1, memory: tuple[int, int] = (1 << 30, 2 << 30), silent_after: int = 99):
    """A port that answers HELLO as a protocol-7 worker, DEVICE_COUNT with ``count`` and every
    GET_DEVICE_MEMORY with ``memory``, for as long as the client asks; silent after ``silent_after`` replies.
    Returns the endpoint, an Event that stops it, and the commands it answered."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()
    asked: list[int] = []

    def recv(conn, n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def serve():
        conn, _ = srv.accept()
        with conn:
            try:
                while not stop.is_set():
                    cmd, size = struct.unpack("<BQ", recv(conn, 9))
                    recv(conn, size)
                    if len(asked) >= silent_after:
                        stop.wait(30)
                        break
                    asked.append(cmd)  # before the reply: the client cannot see the reply before it is counted
                    if cmd == rpc.CMD_HELLO:
                        out = bytes([*rpc.PROTO, 0]) + bytes(rpc.CAPS_SIZE)
                    elif cmd == rpc.CMD_DEVICE_COUNT:
                        out = struct.pack("<I", count)
                    else:
                        out = struct.pack("<QQ", *memory)
                    conn.sendall(struct.pack("<Q", len(out)) + out)
            except (ConnectionError, OSError):
                pass
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", stop, asked


def test_a_huge_device_count_is_one_error_at_once():
    endpoint, stop, asked = fake_worker(count=(1 << 32) - 1)
    t0 = time.monotonic()
    with pytest.raises(rpc.BadReply, match=f"RPC worker {endpoint} reports 4294967295 devices"):
        rpc.probe(endpoint, timeout=5)  # once: 4 billion GET_DEVICE_MEMORY round trips
    assert time.monotonic() - t0 < 5 and asked == [rpc.CMD_HELLO, rpc.CMD_DEVICE_COUNT]  # no device listed
    stop.set()


def test_a_huge_memory_size_is_refused():
    endpoint, stop, _ = fake_worker(count=2, memory=(1 << 62, 1 << 63))
    with pytest.raises(rpc.BadReply, match=f"RPC worker {endpoint} reports .* bytes of memory on device 0"):
        rpc.probe(endpoint, timeout=5)
    stop.set()


def test_a_worker_that_goes_silent_while_listing_times_out():
    endpoint, stop, _ = fake_worker(count=3, silent_after=3)  # HELLO, COUNT, one device, then nothing
    t0 = time.monotonic()
    with pytest.raises(rpc.WorkerLost, match=f"RPC worker {endpoint} did not answer within 1 s"):
        rpc.probe(endpoint, timeout=1)
    assert time.monotonic() - t0 < 10
    stop.set()


def test_bench_against_a_hostile_worker_gives_one_line():
    endpoint, stop, _ = fake_worker(count=(1 << 32) - 1)
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "bench", "--pair", "demo-smollm2",
                               "--rpc", endpoint, "--max-tokens", "4"], cwd=ROOT, capture_output=True, text=True,
                              timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("bench still probing the worker after 240 s")  # once: for ever
    finally:
        stop.set()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{endpoint} reports 4294967295 devices" in proc.stderr


def test_a_worker_with_a_bad_device_exits_at_once():
    if not rpc.supported():
        pytest.fail("this llama.cpp build has no RPC backend")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "worker", "--port", str(port),
                               "--device", "NOPE"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker stayed alive with a bad device")  # once: a thread traceback, then for ever
    assert proc.returncode == 2, proc.stderr
    # the devices this machine has: its GPUs first where there are any, then the CPU
    assert re.search(r"no device 'NOPE' here; this machine has: .*\bCPU\b", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr
    assert "RPC worker on" not in proc.stdout  # it never claimed to be listening
    assert time.monotonic() - t0 < 120


def test_check_devices_lists_the_valid_ones():
    if not rpc.supported():
        pytest.fail("this llama.cpp build has no RPC backend")
    assert rpc.check_devices(["CPU"]) == ["CPU"] and rpc.check_devices([])  # the default: GPUs, else the CPU
    for bad in ("NOPE", "", "CPU\x00x"):
        with pytest.raises(rpc.RpcError, match=r"this machine has: .*\bCPU\b"):
            rpc.check_devices([bad])


def test_a_server_that_cannot_start_ends_its_run():
    if not rpc.supported():
        pytest.fail("this llama.cpp build has no RPC backend")
    with pytest.raises(rpc.RpcError, match="no device 'NOPE'"):
        rpc.start("127.0.0.1", 1, ["NOPE"])  # raised here, before any thread
    with socket.socket() as held:  # the port is taken: said at once, before anything starts
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(rpc.RpcError, match=f"cannot listen on 127.0.0.1:{port}"):
            rpc.start("127.0.0.1", port, ["CPU"], 1)
        # llama.cpp's own server behind the gate, on a taken port: its run ends (start() then sets `ended`)
        code = f"from app.engine.remote import rpc; rpc.serve('127.0.0.1', {port}, ['CPU'], 1); print('ended')"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "ended" in out.stdout, out.stdout + out.stderr


# --- the worker's gate (gate.py): what one client can make a real worker do ------------------------------

def start_worker(*options: str) -> tuple[subprocess.Popen, int, Path]:
    """``launcher.py worker`` with ``options`` on a free port; (process, port, its log file)."""
    if not rpc.supported():
        pytest.fail("this llama.cpp build has no RPC backend")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(tempfile.mkstemp(prefix="tandem-worker-", suffix=".log")[1])
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), "worker", "--port", str(port),
                                 "--threads", "1", *options], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "RPC worker on" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the worker did not start: {log.read_text()}")
        time.sleep(0.2)
    return proc, port, log


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) // 1024


def greeted(port: int) -> socket.socket:
    """A raw connection that has said the RPC handshake and read its answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(struct.pack("<BQ", rpc.CMD_HELLO, rpc.CAPS_SIZE) + bytes(rpc.CAPS_SIZE))
    (size,) = struct.unpack("<Q", rpc._recv(sock, 8))
    assert rpc._recv(sock, size)[:3] == bytes(rpc.PROTO)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


SET_TENSOR = 6


def test_a_declared_size_over_the_limit_closes_the_connection_and_allocates_nothing():
    proc, port, log = start_worker("--max-message-mib", "64")
    try:
        sock = greeted(port)
        before = rss_mib(proc.pid)
        sock.sendall(struct.pack("<BQ", SET_TENSOR, 1 << 30))  # 9 bytes asking for 1 GiB (once: +1 GiB of RSS)
        assert closed_within(sock, 30)
        assert rss_mib(proc.pid) - before < 64
        assert re.search(r"closed 127\.0\.0\.1:\d+: it declared a message of 1073741824 bytes \(command 6\), over "
                         r"this worker's limit of 67108864 bytes \(--max-message-mib\); nothing was allocated",
                         log.read_text()), log.read_text()
        assert rpc.probe(f"127.0.0.1:{port}").devices  # the worker serves the next client
    finally:
        proc.kill()
        proc.wait(10)


def test_a_declared_size_under_the_limit_takes_only_what_arrives_and_a_stall_is_closed():
    proc, port, log = start_worker("--idle-timeout", "2")  # the default limit: the largest lent device's memory
    try:
        sock = greeted(port)
        before = rss_mib(proc.pid)
        sock.sendall(struct.pack("<BQ", SET_TENSOR, 1 << 30) + bytes(1 << 20))  # 1 GiB declared, 1 MiB sent
        time.sleep(1)
        assert rss_mib(proc.pid) - before < 64  # once: llama.cpp's server took the whole GiB at the header
        assert closed_within(sock, 30)
        assert re.search(r"closed 127\.0\.0\.1:\d+: it stopped for \d+ s inside a message", log.read_text())
    finally:
        proc.kill()
        proc.wait(10)


def test_an_idle_client_gives_way_to_a_waiting_one():
    proc, port, log = start_worker("--idle-timeout", "2", "--hold-timeout", "2")
    endpoint = f"127.0.0.1:{port}"
    try:
        silent = socket.create_connection(("127.0.0.1", port))  # connects and says nothing (once: for ever)
        t0 = time.monotonic()
        assert rpc.probe(endpoint, timeout=30).devices
        quiet = greeted(port)  # a client that said HELLO, then nothing
        assert rpc.probe(endpoint, timeout=30).devices
        assert time.monotonic() - t0 < 60
        assert closed_within(silent, 5) and closed_within(quiet, 5)
        assert len(re.findall(r"was idle for \d+ s while another client waited", log.read_text())) == 2
    finally:
        proc.kill()
        proc.wait(10)
