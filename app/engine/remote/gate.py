"""A worker's front door: a relay between the network and llama.cpp's RPC server that bounds what one client can
make the worker do before the server does anything.

llama.cpp's server reads a message's declared size and allocates that much at once (``std::vector::resize``): a
9-byte header made a worker take 1 GiB; and it serves one client at a time, so a client that connected and said
nothing held it for ever. So the server listens on a loopback port of its own (``rpc.start``), and the gate on
the worker's address:

* a message whose declared size is over ``limit`` (``--max-message-mib``; by default the memory of the largest
  device lent, since a tensor lives on one device) closes that connection with a line in the worker's log, and
  nothing is allocated; a message over ``STREAM`` bytes is gathered here as it arrives before the server sees
  its header, so the server allocates only what a client has really sent;
* a client must send its handshake (HELLO) within ``HELLO_S`` seconds and may not stall inside a message for
  ``idle`` seconds (``--idle-timeout``);
* a client quiet between messages for ``hold`` seconds (``--hold-timeout``) gives way as soon as another is
  waiting (at most ``WAITING`` wait; more are refused at once). A loaded split target is quiet between chats
  and its weights live in the server for its connection only, so ``hold`` is long (a reader pausing over a
  reply keeps the worker); an app whose worker was handed to another finds it gone at its next pass and says so.

The gate reads the protocol's framing only (one command byte, a little-endian u64 size, the payload; ``rpc.py``)
and relays the rest as it is; the handshake's transport capabilities are zeroed, so that the connection stays
plain TCP through the gate.
"""

from __future__ import annotations

import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from typing import Callable, Optional

HEADER = struct.Struct("<BQ")
CMD_HELLO = 14  # the handshake, always the first message
CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE: the handshake's transport capabilities; all zero asks for plain TCP
STREAM = 16 << 20  # bytes of a message relayed as they arrive; a larger one is gathered first
CHUNK = 1 << 20
HELLO_S = 10.0
IDLE_S = 60.0
HOLD_S = 900.0
WAITING = 16
TICK = 0.5  # seconds between the checks of a quiet connection
CONNECT_S = 30.0  # for the server behind the gate to start listening

Log = Callable[[str], None]


def say(line: str) -> None:
    """A line of the worker's log."""
    print(f"[tandem] {line}", file=sys.stderr, flush=True)


class Closed(Exception):
    """Why the gate closed a client's connection (its line in the worker's log)."""


class _Ended(Exception):
    """The client or the server closed the connection."""


class Gate:
    def __init__(self, listener: socket.socket, backend: tuple[str, int], limit: int, idle: float = IDLE_S,
                 log: Log = say, hold: float = HOLD_S):
        self.listener, self.backend, self.limit, self.idle, self.log = listener, backend, limit, idle, log
        self.hold = hold
        self._waiting: deque[tuple[socket.socket, str]] = deque()
        self._cond = threading.Condition()

    def run(self) -> None:
        """Accept clients for as long as the listening socket lives; they are served one at a time, in order."""
        threading.Thread(target=self._serve, daemon=True, name="rpc-gate").start()
        while True:
            conn, addr = self.listener.accept()
            peer = f"{addr[0]}:{addr[1]}"
            with self._cond:
                if len(self._waiting) >= WAITING:
                    conn.close()
                    self.log(f"refused {peer}: {WAITING} clients are already waiting for this worker")
                    continue
                self._waiting.append((conn, peer))
                self._cond.notify()

    def someone_waits(self) -> bool:
        with self._cond:
            return bool(self._waiting)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    self._cond.wait()
                conn, peer = self._waiting.popleft()
            try:
                _Session(self, conn).run(peer)
            except (_Ended, OSError):
                pass
            finally:
                conn.close()


class _Session:
    """One client's turn: its messages checked and relayed to the server, the server's answers relayed back."""

    def __init__(self, gate: Gate, client: socket.socket):
        self.gate, self.client = gate, client
        self.started = self.last = time.monotonic()
        self.greeted = False
        self.server_gone = False
        for option in ((socket.IPPROTO_TCP, socket.TCP_NODELAY), (socket.SOL_SOCKET, socket.SO_KEEPALIVE)):
            client.setsockopt(*option, 1)
        client.settimeout(gate.idle or None)  # a client that stops reading the answers is let go too

    def run(self, peer: str) -> None:
        server: Optional[socket.socket] = None
        pump: Optional[threading.Thread] = None
        try:
            server = self._greet()  # the server sees a client only once it has said HELLO
            pump = threading.Thread(target=self._pump, args=(server,), daemon=True, name="rpc-gate-answers")
            pump.start()
            while True:
                self._message(server)
        except Closed as why:
            self.gate.log(f"closed {peer}: {why}")  # (before the client sees its connection end)
        finally:
            for sock in (server, self.client):
                try:
                    if sock is not None:
                        sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if pump is not None:
                pump.join(10)
            if server is not None:
                server.close()

    def _header(self) -> tuple[int, int]:
        cmd, size = HEADER.unpack(self._read(HEADER.size, between=True))
        if size > self.gate.limit:
            raise Closed(f"it declared a message of {size} bytes (command {cmd}), over this worker's limit of "
                         f"{self.gate.limit} bytes (--max-message-mib); nothing was allocated")
        return cmd, size

    def _greet(self) -> socket.socket:
        cmd, size = self._header()
        if cmd != CMD_HELLO or size > 1024:
            raise Closed(f"its first message (command {cmd}, {size} bytes) was not the RPC handshake")
        payload = self._read(size)
        server = self._connect()
        server.sendall(HEADER.pack(cmd, size) + (bytes(size) if size == CAPS_SIZE else payload))
        self.greeted = True
        return server

    def _message(self, server: socket.socket) -> None:
        cmd, size = self._header()
        if size <= STREAM:
            server.sendall(HEADER.pack(cmd, size))
            for piece in self._pieces(size):
                server.sendall(piece)
            return
        gathered = list(self._pieces(size))  # as much memory as the client has sent, not as it declared
        server.sendall(HEADER.pack(cmd, size))
        for piece in gathered:
            server.sendall(piece)

    def _pieces(self, size: int):
        left = size
        while left:
            piece = self._recv(min(left, CHUNK), between=False)
            left -= len(piece)
            yield piece

    def _read(self, n: int, between: bool = False) -> bytes:
        buf = b""
        while len(buf) < n:
            buf += self._recv(n - len(buf), between=between and not buf)
        return buf

    def _recv(self, n: int, between: bool) -> bytes:
        """Up to ``n`` bytes from the client; Closed when it has been quiet too long (``between``: it is between
        two messages, where being quiet is allowed until someone else waits)."""
        while True:
            ready, _, _ = select.select([self.client], [], [], TICK)
            if ready:
                data = self.client.recv(n)
                if not data:
                    raise _Ended()
                self.last = time.monotonic()
                return data
            if self.server_gone:
                raise _Ended()
            now, idle = time.monotonic(), self.gate.idle
            if not self.greeted and now - self.started > HELLO_S:
                raise Closed(f"it sent no RPC handshake within {HELLO_S:g} s")
            quiet = now - self.last
            if idle and quiet >= idle and not between:
                raise Closed(f"it stopped for {quiet:.0f} s inside a message (--idle-timeout)")
            hold = self.gate.hold
            if between and hold and quiet >= hold and self.gate.someone_waits():
                raise Closed(f"it was idle for {quiet:.0f} s while another client waited (--hold-timeout)")

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + CONNECT_S
        while True:
            try:
                server = socket.create_connection(self.gate.backend, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        server.settimeout(None)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return server

    def _pump(self, server: socket.socket) -> None:
        """The server's answers to the client, as they come."""
        try:
            while data := server.recv(CHUNK):
                self.last = time.monotonic()
                self.client.sendall(data)
        except OSError:
            pass
        finally:
            self.server_gone = True
