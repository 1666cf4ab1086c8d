"""llama.cpp's RPC backend: workers that lend their devices to a target split over several machines.

* A **worker** is llama.cpp's own RPC server, ``ggml_backend_rpc_start_server`` of the same library
  (:func:`serve`); it serves one client at a time and has **no authentication**: whoever reaches its port can
  run code-like graph commands and read its memory, so it listens on 127.0.0.1 unless told otherwise.
* The **client** side registers each worker (``ggml_backend_rpc_add_server`` + ``ggml_backend_device_register``,
  as llama.cpp's ``--rpc`` does) in the process that loads the split target; llama.cpp then lists the workers'
  devices first and splits the ``-ngl`` layers over them (``tensor_split``). That process is a child of the app
  (``split.py``) because the RPC client aborts its whole process when a worker fails (``GGML_ABORT`` in
  ``ggml-rpc.cpp``).
* :func:`probe` speaks the protocol's first messages from Python (``HELLO``, ``DEVICE_COUNT``,
  ``GET_DEVICE_MEMORY``) so that an unreachable worker, a busy one and a version mismatch are clear errors
  before anything is loaded. Wire format (``send_rpc_cmd``): one command byte, a little-endian u64 input size,
  the input; the reply is a u64 size and the output.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import llama_cpp as L

from app.engine.llama import devices
from app.engine.llama.backend import BackendError, default_threads
from app.engine.llama.llamalog import quiet_logs
from app.engine.remote import gate
from app.engine.remote.gate import CAPS_SIZE, CMD_HELLO

PROTO = (7, 0, 0)  # RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION of the vendored ggml-rpc.h
MAX_SERVERS = 16  # GGML_RPC_MAX_SERVERS
DEFAULT_PORT = 50052  # rpc-server's default
CMD_GET_DEVICE_MEMORY, CMD_DEVICE_COUNT = 11, 15  # (CMD_HELLO and CAPS_SIZE: gate.py, which reads the framing)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_DEVICES = 16  # devices one worker may report; llama.cpp's workers lend a handful (a larger count is garbage)
MAX_BYTES = 1 << 50  # a device's memory as a worker reports it (1 PiB): anything larger is garbage


class RpcError(BackendError):
    """A worker could not be used; the message says which and why."""

    hint = ""  # the message says what to do


class WorkerUnreachable(RpcError):
    pass


class WorkerBusy(RpcError):
    pass


class VersionMismatch(RpcError):
    pass


class WorkerLost(RpcError):
    """A worker stopped answering while the split target was loaded or generating."""


class BadReply(RpcError):
    """A worker's reply is out of any sane bound (a device count, a memory size): not a llama.cpp worker."""


@dataclass(frozen=True)
class RemoteDevice:
    endpoint: str
    index: int
    free: int
    total: int

    @property
    def name(self) -> str:
        return f"{self.endpoint}#{self.index}"


@dataclass(frozen=True)
class Worker:
    endpoint: str
    version: tuple[int, int, int]
    devices: tuple[RemoteDevice, ...]

    def line(self) -> str:
        devs = ", ".join(f"device {d.index}: {d.free / 2**30:.1f} of {d.total / 2**30:.1f} GiB free"
                         for d in self.devices)
        return f"{self.endpoint} (RPC v{'.'.join(map(str, self.version))}): {devs or 'no devices'}"


def parse_endpoints(text: str | Sequence[str]) -> tuple[str, ...]:
    """``host:port[,host:port…]`` → the endpoints in order, checked and without repeats."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"an RPC worker is host:port (for example 127.0.0.1:{DEFAULT_PORT}); not {item!r}")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"the port of RPC worker {item!r} must be a number from 1 to 65535")
        if any(c.isspace() for c in host):
            raise ValueError(f"the host of RPC worker {item!r} contains spaces")
        endpoint = f"{host}:{int(port)}"
        if endpoint not in out:
            out.append(endpoint)
    if len(out) > MAX_SERVERS:
        raise ValueError(f"llama.cpp takes at most {MAX_SERVERS} RPC workers; {len(out)} were given")
    return tuple(out)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def alive(endpoint: str, timeout: float = 2.0) -> bool:
    """Whether the worker's port still accepts connections (its process is up). Only a TCP connect: a worker
    serving another client still passes, since the kernel queues the connection."""
    try:
        with socket.create_connection(_split(endpoint), timeout=timeout):
            return True
    except OSError:
        return False


def _call(sock: socket.socket, cmd: int, payload: bytes, out_size: int) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    head = _recv(sock, 8)
    (size,) = struct.unpack("<Q", head)
    if size != out_size:
        raise ValueError(f"reply of {size} bytes, expected {out_size}")
    return _recv(sock, size)


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the worker")
        buf += chunk
    return buf


def probe(endpoint: str, timeout: float = 5.0) -> Worker:
    """Connect, check the protocol version and list the worker's devices with their free memory."""
    host, port = _split(endpoint)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise WorkerUnreachable(
            f"RPC worker {endpoint} is unreachable ({exc.strerror or exc}): start it there with "
            f"'python launcher.py worker --port {port}' (and --host to listen beyond loopback), "
            "and check the address and any firewall") from None
    with sock:
        try:
            hello = _call(sock, CMD_HELLO, bytes(CAPS_SIZE), 4 + CAPS_SIZE)
        except socket.timeout:
            raise WorkerBusy(f"RPC worker {endpoint} accepted the connection but did not answer within "
                             f"{timeout:.0f} s: llama.cpp's RPC server serves one client at a time, so another "
                             "app is probably using it") from None
        except (OSError, ValueError) as exc:
            raise VersionMismatch(f"RPC worker {endpoint} did not answer the RPC handshake ({exc}): is it a "
                                  f"llama.cpp RPC server of protocol {PROTO[0]}.x?") from None
        version = tuple(hello[:3])
        if version[0] != PROTO[0] or version[1] > PROTO[1]:
            raise VersionMismatch(
                f"RPC worker {endpoint} speaks RPC protocol {'.'.join(map(str, version))} but this llama.cpp "
                f"speaks {'.'.join(map(str, PROTO))}: run the same Tandem (llama-cpp-python) version on both "
                "machines")
        try:
            (count,) = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4))
            if count > MAX_DEVICES:
                raise BadReply(f"RPC worker {endpoint} reports {count} devices (at most {MAX_DEVICES} expected): "
                               "not a working llama.cpp RPC server; check the address")
            found = []
            for i in range(count):
                free, total = struct.unpack("<QQ", _call(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16))
                if free >= MAX_BYTES or total >= MAX_BYTES:
                    raise BadReply(f"RPC worker {endpoint} reports {max(free, total)} bytes of memory on device "
                                   f"{i} (below 2^50 expected): not a working llama.cpp RPC server")
                found.append(RemoteDevice(endpoint, i, free, total))
        except socket.timeout:
            raise WorkerLost(f"RPC worker {endpoint} did not answer within {timeout:.0f} s while listing its "
                             "devices") from None
        except (OSError, ValueError) as exc:
            raise WorkerLost(f"RPC worker {endpoint} stopped answering while listing its devices ({exc})") from None
    return Worker(endpoint, version, tuple(found))  # type: ignore[arg-type]


def probe_all(endpoints: Sequence[str], timeout: float = 5.0) -> list[Worker]:
    return [probe(e, timeout) for e in endpoints]


# --- the library -----------------------------------------------------------------------------------------

def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (built with ``GGML_RPC=ON``)."""
    quiet_logs()
    return bool(L.llama_supports_rpc())


def require() -> None:
    if not supported():
        raise RpcError("this llama.cpp build has no RPC backend: reinstall with the launcher (it builds with "
                       "-DGGML_RPC=ON) or set CMAKE_ARGS to include -DGGML_RPC=ON")


def _proc(g: ctypes.CDLL, name: str, restype, argtypes):
    reg = g.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError("this llama.cpp build has no RPC backend (build it with -DGGML_RPC=ON)")
    addr = g.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not addr:
        raise RpcError(f"the RPC backend of this llama.cpp has no {name}")
    return ctypes.CFUNCTYPE(restype, *argtypes)(addr)


def register(endpoints: Sequence[str]) -> int:
    """Add each worker's devices to llama.cpp's device list (this process only, for good); returns how many
    devices were added. Call :func:`probe` first: the RPC client aborts the process on an unreachable worker."""
    quiet_logs()
    g = devices.ggml()
    add = _proc(g, "ggml_backend_rpc_add_server", ctypes.c_void_p, [ctypes.c_char_p])
    n = 0
    for endpoint in endpoints:
        reg = add(endpoint.encode())
        if not reg:
            raise RpcError(f"RPC worker {endpoint} reports no devices")
        for i in range(g.ggml_backend_reg_dev_count(reg)):
            g.ggml_backend_device_register(g.ggml_backend_reg_dev_get(reg, i))
            n += 1
    return n


def check_devices(names: Sequence[str] = ()) -> list[str]:
    """The devices a worker will lend: ``names`` checked against ggml's device registry (the names
    ``devices.local_devices`` lists, matched without regard to case as ggml does), or by default every GPU,
    else the CPU, as ``rpc-server`` picks. Raises RpcError naming the bad device and listing the valid ones;
    call it before starting the server, so a typo fails at once instead of in the server's thread."""
    require()
    g = devices.ggml()
    known = devices.local_devices()
    if not names:
        return [d.name for d in known if d.kind not in ("cpu", "accel")] or \
            [d.name for d in known if d.kind == "cpu"][:1]
    for name in names:
        if not name or "\x00" in name or not g.ggml_backend_dev_by_name(name.encode("utf-8", "replace")):
            raise RpcError(f"no device {name!r} here; this machine has: "
                           + ", ".join(f"{d.name} ({d.description})" for d in known)
                           + " (`launcher.py worker --list-devices` lists them)")
    return list(names)


@dataclass
class Served:
    """A server started by :func:`start`: ``ended`` is set when it stops for any reason (llama.cpp could not
    start it, or an error, kept in ``error``), so that the caller can exit non-zero instead of living on with
    nothing listening."""

    ended: threading.Event
    error: Optional[BaseException] = None


def start(host: str, port: int, names: Sequence[str] = (), threads: int = 0, cache_dir: Optional[str] = None,
          max_message: Optional[int] = None, idle: float = gate.IDLE_S, log: gate.Log = gate.say,
          hold: float = gate.HOLD_S) -> Served:
    """Check the devices (:func:`check_devices`: a bad name raises here, before anything listens) and listen on
    ``host:port`` (:func:`listen`), then run :func:`serve` on a loopback port of its own and the gate in front of
    it (``gate.py``: messages up to ``max_message`` bytes, by default the largest lent device's memory; a client
    stalled ``idle`` s inside a message is let go, one quiet ``hold`` s between messages gives way to a waiting
    one), each on a daemon thread (the server blocks in C; the main thread
    stays free for signals)."""
    names = check_devices(names)
    listener = listen(host, port)
    with socket.socket() as probe:  # the server's own port: loopback only, behind the gate
        probe.bind(("127.0.0.1", 0))
        inner = probe.getsockname()[1]
    door = gate.Gate(listener, ("127.0.0.1", inner), max_message or largest_device(names), idle, log, hold)
    served = Served(threading.Event())

    def run(target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which exits with it
            served.error = exc
        finally:
            served.ended.set()

    threading.Thread(target=run, args=(serve, "127.0.0.1", inner, names, threads, cache_dir), daemon=True,
                     name="rpc-server").start()
    threading.Thread(target=run, args=(door.run,), daemon=True, name="rpc-gate-door").start()
    return served


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, or RpcError saying why not (llama.cpp only says "Failed to create
    server socket")."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(gate.WAITING)
    except OSError as exc:
        sock.close()
        raise RpcError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another worker there? choose "
                       "another --port)") from None
    return sock


def largest_device(names: Sequence[str]) -> int:
    """Bytes of the largest of the devices ``names``: no tensor sent to them can be larger (the gate's default
    limit on a message, with a MiB for the tensor's description)."""
    wanted = {n.lower() for n in names}
    sizes = [d.total for d in devices.local_devices() if d.name.lower() in wanted]
    return (max(sizes, default=0) or 64 << 30) + (1 << 20)


def serve(host: str, port: int, names: Sequence[str] = (), threads: int = 0,
          cache_dir: Optional[str] = None) -> None:
    """Run llama.cpp's RPC server on ``host:port`` with the devices ``names`` (checked by
    :func:`check_devices`). Blocks for as long as the server runs; returns only when llama.cpp could not
    start it (the port in use)."""
    g = devices.ggml()
    ptrs = [g.ggml_backend_dev_by_name(name.encode()) for name in check_devices(names)]
    start = _proc(g, "ggml_backend_rpc_start_server", None,
                  [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                   ctypes.POINTER(ctypes.c_void_p)])
    arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
    endpoint = f"{host}:{port}"
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads or default_threads(), len(ptrs), arr)
