"""A request whose headers never end, for the header-deadline tests of `serve` and the app."""

from __future__ import annotations

import socket
import time


def half_sent_closed_after(host: str, port: int) -> float:
    """Send half a request and wait; the seconds until the server closed the connection (asserted closed within
    the deadline plus 10 s)."""
    from app.server.serve import HEADER_S

    with socket.create_connection((host, port), timeout=HEADER_S + 20) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        t0 = time.monotonic()
        closed = sock.recv(1024) == b""  # blocks until the server closes it (or the timeout)
        waited = time.monotonic() - t0
    print(f"\nhalf-sent request closed after {waited:.1f} s (deadline {HEADER_S} s)")
    assert closed and waited < HEADER_S + 10
    return waited
