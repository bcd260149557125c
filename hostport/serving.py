"""Serving HTTP on a --metrics-address without letting clients pile up threads.

``ThreadingMixIn`` starts a thread per connection and waits on it as long as the client likes: 1,500 idle
connections were 1,500 threads (+38 MiB) in nfd-lite. Here each connection's reads and writes time out,
and connections over a cap are closed at once, before any thread starts. Both commands serve their
/metrics (and nfd-lite its probes) this way.

What is served is a few GETs a minute from Prometheus and the kubelet, so the HTTP is the least that
answers them: the request line and headers are read (within limits), one answer is written and the
connection is closed. ``http.server`` would do the same, but imports ``http.client`` and with it
``ssl``: 5.4 MiB of a gfd daemon that makes no TLS connection (benchmarks/README.md).
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

CONNECTION_TIMEOUT = 5.0  # seconds a connection may stay silent while its request is read or answered
MAX_CONNECTIONS = 16  # connections served at once; a scrape and two probes need three
MAX_LINE = 8192  # bytes of the request line and of each header line
MAX_HEADERS = 100
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


class BoundedThreadingMixIn(socketserver.ThreadingMixIn):
    """A thread per connection, at most ``max_connections`` at once, each socket with a timeout."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: connections over the cap are accepted to be closed
    max_connections = MAX_CONNECTIONS
    connection_timeout = CONNECTION_TIMEOUT
    _slots: threading.BoundedSemaphore | None = None

    def _slot(self) -> threading.BoundedSemaphore:
        if self._slots is None:
            self._slots = threading.BoundedSemaphore(self.max_connections)
        return self._slots

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slot().acquire(blocking=False):
            cast(socketserver.TCPServer, self).shutdown_request(request)  # over the cap: closed, no thread
            return
        if isinstance(request, socket.socket):
            request.settimeout(self.connection_timeout)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slot().release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slot().release()


# What a path answers: its status, body and content type, computed per request.
Answer = tuple[int, bytes, str]
Routes = Mapping[str, Callable[[], Answer]]


def address_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The family to listen with for ``host`` (IPv6 literals included), and the host as it binds."""
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return family, str(sockaddr[0])


class _RequestTooLarge(Exception):
    pass


def _read_line(stream: Any) -> bytes:
    line: bytes = stream.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise _RequestTooLarge
    return line


class _RouteHandler(socketserver.StreamRequestHandler):
    routes: Routes = {}

    def handle(self) -> None:
        try:
            request = _read_line(self.rfile).decode("latin-1").split()
            for _ in range(MAX_HEADERS):  # the headers: nothing here needs them
                if _read_line(self.rfile) in (b"\r\n", b"\n", b""):
                    break
            else:
                raise _RequestTooLarge
        except _RequestTooLarge:
            self._answer("GET", (400, b"request too large\n", "text/plain"))
            return
        if len(request) != 3 or not request[2].startswith("HTTP/"):
            self._answer("GET", (400, b"bad request\n", "text/plain"))
            return
        method, target = request[0], request[1]
        if method not in ("GET", "HEAD"):
            self._answer(method, (405, b"only GET\n", "text/plain"))
            return
        route = self.routes.get(target.split("?", 1)[0])
        self._answer(method, route() if route else (404, b"not found\n", "text/plain"))

    def _answer(self, method: str, answer: Answer) -> None:
        code, body, content_type = answer
        head = (
            f"HTTP/1.1 {code} {REASONS.get(code, '')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        self.wfile.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))


class RouteServer:
    """GET ``routes`` (path -> answer) on host:port, from a daemon thread, within the connection cap and
    timeouts; any other path is 404."""

    def __init__(self, host: str, port: int, routes: Routes, *, name: str) -> None:
        family, bind = address_family(host, port)

        class Handler(_RouteHandler):
            pass

        Handler.routes = routes

        class Server(BoundedThreadingMixIn, socketserver.TCPServer):
            address_family = family
            allow_reuse_address = True

        self.server = Server((bind, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self) -> RouteServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
