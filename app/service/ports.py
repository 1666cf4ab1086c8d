"""Finding a TCP port to serve on (the app, the API server, tests and the overhead measurement)."""

from __future__ import annotations

import os
import socket


def _socket(host: str) -> socket.socket:
    return socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)


def port_is_free(host: str, port: int) -> bool:
    """Nothing listens on ``port``: connections of a previous run in TIME_WAIT do not count (the server binds
    with SO_REUSEADDR too, so a restart does not wait them out)."""
    with _socket(host) as s:
        if os.name != "nt":  # on Windows the option would let two servers share a port
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port(host: str, start: int, tries: int = 50) -> int:
    """The first free port from ``start`` on ``host``; SystemExit naming the range when all are taken."""
    for port in range(start, start + tries):
        if port_is_free(host, port):
            return port
    raise SystemExit(f"no free port in {start}..{start + tries - 1} on {host}")


def ephemeral_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free right now (for servers started by tests and measurements)."""
    with _socket(host) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
