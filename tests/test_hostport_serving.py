"""Both commands' metrics servers under hostile and idle connections: however many connections come, and
however slowly they send, a prober that sends its request at once is answered; each connection is closed
at one deadline from its accept; a flood of idle clients costs no thread; and the limits on a request's
lines are exact."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from gfd.metrics import PrometheusMetrics
from hostport.serving import MAX_CONNECTIONS, MAX_HEADERS, MAX_LINE, RouteServer
from nfd_lite.health import HealthServer
from nfd_lite.metrics import WriterMetrics
from tests.hostile_clients import HostileClients
from tests.waiting import eventually

IDLE = 300
RED_TEAM = 40  # hostile connections, as many as the red team's
FLOOD = 2 * MAX_CONNECTIONS  # more than there are slots, so that the server has to push some out
PROBES = 40
# What the kubelet sends for an httpGet probe, and how long it waits for the answer (timeoutSeconds: 1).
KUBELET_PROBE = (
    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.30\r\nAccept: */*\r\n"
    b"Connection: close\r\n\r\n"
)
KUBELET_TIMEOUT = 1.0


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


def probe(host: str, port: int, request: bytes = KUBELET_PROBE, timeout: float = KUBELET_TIMEOUT) -> int:
    """One probe as the kubelet makes it: the status of the whole answer within ``timeout`` of the
    connect, or 0 (refused, reset, closed unanswered or too late)."""
    deadline = time.monotonic() + timeout
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as client:
            client.sendall(request)
            while (left := deadline - time.monotonic()) > 0:
                client.settimeout(left)
                if not (chunk := client.recv(65536)):
                    break
                answer += chunk
            else:
                return 0
    except OSError:
        return 0
    head, _, body = answer.partition(b"\r\n\r\n")
    words = head.split(b" ", 2)
    length = next((int(h[15:]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")), -1)
    return int(words[1]) if len(words) > 1 and words[1].isdigit() and length == len(body) else 0


def failed_probes(host: str, port: int, count: int = PROBES, interval: float = 0.15) -> int:
    """How many of ``count`` kubelet probes, ``interval`` apart, were not answered 200."""
    failed = 0
    for _ in range(count):
        started = time.monotonic()
        failed += probe(host, port) != 200
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    return failed


@contextmanager
def _nfd_lite_server(port: int) -> Iterator[HealthServer]:
    server = HealthServer(f"127.0.0.1:{port}", WriterMetrics(), lambda: True, lambda: True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("attackers", [RED_TEAM, FLOOD])
@pytest.mark.parametrize("mode", ["drip", "reconnect"])
def test_probes_are_answered_while_hostile_connections_come_and_come_back(mode: str, attackers: int) -> None:
    """The red team's attack: connections that drip a byte every 2 s, or send nothing, and come back as
    soon as they are closed; 40 as the red team had (which took every slot of the old server), and twice
    as many as there are slots now. Each kubelet probe must still be answered within its 1 s: three misses
    in a row and the kubelet restarts nfd-lite."""
    port = _free_port()
    with _nfd_lite_server(port), HostileClients("127.0.0.1", port, mode, connections=attackers) as attack:
        time.sleep(2.5)  # the attackers are all connected (the drippers have sent their first bytes)
        failed = failed_probes("127.0.0.1", port)
    assert failed == 0, f"{failed} of {PROBES} probes failed under {attackers} {mode} connections"
    # The attack ran all along: the server closed attackers (at their deadline, or to make room), and
    # they came back.
    assert attack.stats["opened"] > attackers and attack.stats["closed_by_server"] > 0, attack.stats


def test_a_request_dripped_past_the_deadline_is_closed_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A byte every 0.2 s is well within any timeout per read; the connection is closed one deadline after
    its accept all the same, unanswered, not held as long as the bytes keep coming."""
    monkeypatch.setattr(RouteServer, "connection_timeout", 1.0)
    port = _free_port()
    with _nfd_lite_server(port), socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        accepted = time.monotonic()
        closed_after = None
        received = b""
        for byte in (b"GET /healthz HTTP/1.1\r\nX-Drip: " + b"a" * 200)[:150]:  # 30 s of dripping at most
            try:
                client.sendall(bytes([byte]))
                client.settimeout(0.2)
                received = client.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset by the server
                pass
            closed_after = time.monotonic() - accepted
            break
    assert closed_after is not None, "the dripping connection was held for 30 s"
    assert received == b"", f"answered instead of closed: {received!r}"
    # 1 s deadline; 5 s leaves room for a loaded machine, and is far below the 30 s the drip went on.
    assert 0.9 <= closed_after < 5, f"closed {closed_after:.1f} s after its accept"


def test_a_connection_being_answered_keeps_its_slot_when_all_are_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client slow to read a large answer is not pushed out by newer connections: only connections
    still sending their request give up their slot."""
    monkeypatch.setattr(RouteServer, "connection_timeout", 60.0)
    big = b"x" * (16 << 20)  # more than the kernel buffers of both ends hold while the client reads nothing
    port = _free_port()
    server = RouteServer("127.0.0.1", port, {"/big": lambda: (200, big, "text/plain")}, name="test").start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as reader:
            reader.sendall(b"GET /big HTTP/1.1\r\n\r\n")
            head = reader.recv(100)  # its answer has started: it is being answered, not reading
            assert head.startswith(b"HTTP/1.1 200 ")
            others = [
                socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3 * MAX_CONNECTIONS)
            ]
            try:
                assert eventually(lambda: probe("127.0.0.1", port, b"GET /none HTTP/1.1\r\n\r\n") == 404, 10)
                # (the server is still writing the answer: what follows tests the slot, not a finished write)
                assert any(c.out for c in server._connections.values())
            finally:
                for other in others:
                    other.close()
            received = len(head)
            while chunk := reader.recv(1 << 20):
                received += len(chunk)
        assert received > len(big), f"the answer was cut at {received} bytes"
    finally:
        server.stop()


@pytest.mark.parametrize(("headers", "status"), [(MAX_HEADERS, 200), (MAX_HEADERS + 1, 400)])
def test_a_request_may_have_max_headers_header_lines(headers: int, status: int) -> None:
    port = _free_port()
    with _nfd_lite_server(port):
        request = b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * headers + b"\r\n"
        assert probe("127.0.0.1", port, request, timeout=10) == status


@pytest.mark.parametrize(("length", "status"), [(MAX_LINE, 200), (MAX_LINE + 1, 400)])
def test_a_line_may_have_max_line_bytes_with_its_line_end(length: int, status: int) -> None:
    port = _free_port()
    with _nfd_lite_server(port):
        line = b"X: " + b"y" * (length - 5) + b"\r\n"
        assert len(line) == length
        request = b"GET /healthz HTTP/1.1\r\n" + line + b"\r\n"
        assert probe("127.0.0.1", port, request, timeout=10) == status


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
def test_idle_connections_cost_no_thread_and_time_out(
    serve: Callable[[int], Callable[[], None]], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RouteServer, "connection_timeout", 1.0)
    port = _free_port()
    stop = serve(port)
    try:
        before = threading.active_count()
        with _idle_connections(port, IDLE) as clients:
            assert eventually(lambda: sum(_closed_by_server(c) for c in clients[-10:]) == 10, timeout=10)
            assert threading.active_count() == before
            assert all(_closed_by_server(c) for c in clients[:MAX_CONNECTIONS])  # pushed out or timed out
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
