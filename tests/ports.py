"""Loopback ports for the programs tests and benchmarks start, each handed out once per process."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

_LOCK = threading.Lock()
_FIRST = 10_000
_next: int | None = None


def low_port() -> int:
    """A free loopback port below the kernel's ephemeral range, not handed out before in this process: one
    the kernel picked (bind to port 0) could be taken, between the check and the program's own bind, by
    the ephemeral end of one of the many connections a fleet or a benchmark opens to the API server."""
    global _next
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    span = max(low - _FIRST, 1_000)
    with _LOCK:
        if _next is None:
            _next = _FIRST + os.getpid() * 7919 % span  # two runs at once start apart
        for _ in range(span):
            port = _next
            _next = _FIRST + (_next - _FIRST + 1) % span
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free port left below the ephemeral range")
