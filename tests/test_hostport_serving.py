"""Both commands' metrics servers under idle connections: a cap on connections served at once (no thread
for the rest) and a timeout on each, so a flood of idle clients costs neither threads nor memory, and the
probes and scrapes answer again once it is over."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from gfd.metrics import PrometheusMetrics
from hostport.serving import MAX_CONNECTIONS, BoundedThreadingMixIn
from nfd_lite.health import HealthServer
from nfd_lite.metrics import WriterMetrics
from tests.waiting import eventually

IDLE = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


@contextmanager
def _idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    clients = []
    try:
        for _ in range(count):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        yield clients
    finally:
        for client in clients:
            client.close()


def _closed_by_server(client: socket.socket) -> bool:
    client.settimeout(5)
    try:
        return client.recv(1) == b""
    except OSError:
        return True


def _nfd_lite(port: int) -> Callable[[], None]:
    server = HealthServer(f"127.0.0.1:{port}", WriterMetrics(), lambda: True, lambda: True)
    server.start()
    return server.stop


def _gfd(port: int) -> Callable[[], None]:
    PrometheusMetrics().serve("127.0.0.1", port)
    return lambda: None  # a daemon thread, as in gfd; the port is the test's own


@pytest.mark.parametrize(("serve", "path"), [(_nfd_lite, "/healthz"), (_gfd, "/metrics")])
def test_idle_connections_are_capped_and_time_out(
    serve: Callable[[int], Callable[[], None]], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(BoundedThreadingMixIn, "connection_timeout", 1.0)
    port = _free_port()
    stop = serve(port)
    try:
        before = threading.active_count()
        with _idle_connections(port, IDLE) as clients:
            assert eventually(lambda: sum(_closed_by_server(c) for c in clients[-10:]) == 10, timeout=10)
            assert threading.active_count() <= before + MAX_CONNECTIONS
            assert all(_closed_by_server(c) for c in clients[:MAX_CONNECTIONS])  # timed out, not held
            assert eventually(lambda: _status(port, path) == 200, timeout=10)
    finally:
        stop()
