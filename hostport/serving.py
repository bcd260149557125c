"""Serving HTTP on a --metrics-address without letting clients pile up threads.

``ThreadingMixIn`` starts a thread per connection and waits on it as long as the client likes: 1,500 idle
connections were 1,500 threads (+38 MiB) in nfd-lite. Here each connection's reads and writes time out,
and connections over a cap are closed at once, before any thread starts. Both commands serve their
/metrics (and nfd-lite its probes) this way.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, cast

CONNECTION_TIMEOUT = 5.0  # seconds a connection may stay silent while its request is read or answered
MAX_CONNECTIONS = 16  # connections served at once; a scrape and two probes need three


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


class RouteServer:
    """GET ``routes`` (path -> answer) on host:port, from a daemon thread, within the connection cap and
    timeouts; any other path is 404."""

    def __init__(self, host: str, port: int, routes: Routes, *, name: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                code, body, content_type = route() if route else (404, b"not found\n", "text/plain")
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Scrapes and probes are not worth a log line each."""

        family, bind = address_family(host, port)

        class Server(BoundedThreadingMixIn, HTTPServer):
            address_family = family

        self.server = Server((bind, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self) -> RouteServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
