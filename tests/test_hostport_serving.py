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
from hostport.serving import MAX_CONNECTIONS, BoundedThreadingMixIn, RouteServer
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


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(request)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    return answer


def test_the_route_server_answers_what_scrapers_and_probes_send_and_refuses_the_rest() -> None:
    port = _free_port()
    routes = {"/metrics": lambda: (200, b"up 1\n", "text/plain")}
    server = RouteServer("127.0.0.1", port, routes, name="test").start()
    try:
        get = _raw(port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n")
        assert get.startswith(b"HTTP/1.1 200 OK\r\n") and get.endswith(b"\r\n\r\nup 1\n")
        assert b"Content-Length: 5\r\n" in get and b"Connection: close\r\n" in get
        head = _raw(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")
        assert _raw(port, b"GET /other HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        assert _raw(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        assert _raw(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert _raw(port, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert _raw(port, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n").startswith(b"HTTP/1.1 400 ")
        assert _status(port, "/metrics") == 200  # and an ordinary client is served after all that
    finally:
        server.stop()
