"""Serving HTTP on a --metrics-address so that no client, or crowd of clients, keeps the probes unanswered.

What is served is a few GETs a minute from Prometheus and the kubelet, so the HTTP is the least that
answers them: the request line and headers are read (within limits), one answer is written and the
connection is closed. ``http.server`` would do the same, but imports ``http.client`` and with it
``ssl``: 5.4 MiB of a gfd daemon that makes no TLS connection (benchmarks/README.md). Both commands serve
their /metrics (and nfd-lite its probes) this way.

One thread serves every connection, on non-blocking sockets: a waiting connection costs a socket and its
unfinished line, never a thread (``ThreadingMixIn``'s thread per connection made 1,500 idle connections
1,500 threads, +38 MiB, in nfd-lite). Every answer is computed in memory (a counter, a flag), so serving
them one after another delays no one.

Three rules keep the kubelet answered however the connections come (a red team's 40 connections,
dripping a byte every 2 s or reconnecting as soon as closed, took all 16 slots of the thread-per-connection
server and 40 of 40 probes failed, so the kubelet restarted nfd-lite about every 90 s):

- one deadline per connection, ``CONNECTION_TIMEOUT`` from its accept for reading the request and writing
  the answer, however the bytes trickle in: a timeout per read let a byte every 2 s hold a slot forever;
- when all ``MAX_CONNECTIONS`` slots are taken, a new connection takes the slot of the oldest one still
  sending its request, once that one has had ``EVICTION_GRACE`` to send it: a prober sends its request at
  once (the kubelet, Prometheus), so it is answered, not pushed out by the flood that comes after it;
- while no slot can be taken so, new connections are left in the kernel's accept queue, where their
  requests wait with them, instead of being accepted and closed unanswered. A connection whose answer is
  being written keeps its slot.

The grace also bounds the work a flood makes: at most ``MAX_CONNECTIONS / EVICTION_GRACE`` evictions a
second, instead of as many as the CPU allows.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import cast

CONNECTION_TIMEOUT = 5.0  # seconds from a connection's accept to its answer written, in all
# Connections held at once. Each costs a socket and its unfinished line (no thread), so the cap is well
# above what a scrape and two probes need: a few dozen stray or hostile connections are just held until
# their deadline, and only a larger flood makes the server push connections out.
MAX_CONNECTIONS = 64
# Seconds a connection may take to send its request before a newer one may take its slot: far more than a
# prober takes between its connect and its request, and short enough that the accept queue (the listen
# backlog, 128) drains at 64 / 0.1 s = 640 connections a second under any flood, so a probe waiting there
# behind it is accepted within a fraction of the kubelet's 1 s.
EVICTION_GRACE = 0.1
MAX_LINE = 8192  # bytes of the request line and of each header line, its line end included
MAX_HEADERS = 100  # header lines a request may have; the blank line that ends them is not one
# Connections accepted per round of the loop, between which every connection with bytes waiting is read.
ACCEPTS_PER_ROUND = 4
READ_SIZE = 4096
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# SO_LINGER 0: a connection closed unanswered (evicted, or past its deadline) is reset, so the flood that
# caused it leaves no TIME_WAIT sockets behind.
_RESET = struct.pack("ii", 1, 0)
INF = float("inf")

log = logging.getLogger(__name__)

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


class _Connection:
    """One client: its deadline, the request read so far, then the answer left to write."""

    __slots__ = ("accepted", "deadline", "headers", "out", "partial", "request", "sock")

    def __init__(self, sock: socket.socket, accepted: float, timeout: float) -> None:
        self.sock = sock
        self.accepted = accepted
        self.deadline = accepted + timeout
        self.partial = b""  # the line being read; earlier header lines are counted, not kept
        self.request: list[str] | None = None  # the request line's words, once it is read
        self.headers = 0
        self.out: memoryview | None = None  # the answer not yet written; None while reading

    def feed(self, data: bytes) -> bool:
        """Take bytes read; whether the request (up to the blank line after its headers) is complete."""
        buffer = self.partial + data
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            if self._line(buffer[start : end + 1]):
                return True
            start = end + 1
        self.partial = buffer[start:]
        if len(self.partial) >= MAX_LINE:  # even with its line end next, the line is too long
            raise _RequestTooLarge
        return False

    def end(self) -> None:
        """The client sent all it will (EOF): what came so far is the request, as a reader of lines
        would take it."""
        if self.partial:
            self._line(self.partial)
        if self.request is None:
            self.request = []

    def _line(self, line: bytes) -> bool:
        if len(line) > MAX_LINE:
            raise _RequestTooLarge
        if self.request is None:
            self.request = line.decode("latin-1").split()
            return False
        if line in (b"\r\n", b"\n"):
            return True
        self.headers += 1  # nothing here needs the headers
        if self.headers > MAX_HEADERS:
            raise _RequestTooLarge
        return False


class RouteServer:
    """GET ``routes`` (path -> answer) on host:port, from one daemon thread, within the connection cap and
    each connection's deadline; any other path is 404."""

    max_connections = MAX_CONNECTIONS
    connection_timeout = CONNECTION_TIMEOUT
    listen_backlog = 128  # connections the kernel holds until the loop accepts them

    def __init__(self, host: str, port: int, routes: Routes, *, name: str) -> None:
        family, bind = address_family(host, port)
        self.routes = routes
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((bind, port))
            self.listener.listen(self.listen_backlog)
            self.listener.setblocking(False)
        except OSError:
            self.listener.close()
            raise
        self.server_address = self.listener.getsockname()
        self._wake, self._waker = socket.socketpair()  # stop() writes to _waker to end the loop's wait
        self._selector = selectors.DefaultSelector()
        self._connections: dict[socket.socket, _Connection] = {}  # in accept order, the oldest first
        self._stopping = False
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def start(self) -> RouteServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        if self.thread.is_alive():
            self._waker.send(b"x")
            self.thread.join(timeout=10)
        for conn in list(self._connections.values()):
            self._close(conn, reset=True)
        for sock in (self.listener, self._wake, self._waker):
            sock.close()
        self._selector.close()

    def _serve(self) -> None:
        self._selector.register(self._wake, selectors.EVENT_READ)
        accepting = False
        while not self._stopping:
            # Accept only while a slot is free or can be taken: otherwise the listener, readable as long as
            # connections wait in its queue, would wake the loop for nothing.
            now = time.monotonic()
            room_at = self._room_at()
            if accepting != (room_at <= now):
                accepting = not accepting
                if accepting:
                    self._selector.register(self.listener, selectors.EVENT_READ)
                else:
                    self._selector.unregister(self.listener)
            wake_at = min(
                [c.deadline for c in self._connections.values()] + [room_at if not accepting else INF]
            )
            events = self._selector.select(None if wake_at == INF else max(0.0, wake_at - now))
            for key, _ in events:
                if key.fileobj is self.listener:
                    self._accept()
                # None: closed earlier in this round, to make room
                elif (conn := self._connections.get(cast(socket.socket, key.fileobj))) is not None:
                    if conn.out is None:
                        self._read(conn)
                    else:
                        self._write(conn)
            now = time.monotonic()
            for conn in [c for c in self._connections.values() if c.deadline <= now]:
                self._close(conn, reset=True)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_ROUND):
            if self._room_at() > time.monotonic():
                return  # the rest wait in the accept queue
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # e.g. out of file descriptors: the next round tries again
                log.warning("%s: cannot accept a connection: %s", self.thread.name, err)
                return
            if len(self._connections) >= self.max_connections and not self._make_room():
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                sock.close()  # not expected: _room_at said there was room; the cap holds all the same
                continue
            sock.setblocking(False)
            conn = _Connection(sock, time.monotonic(), self.connection_timeout)
            self._connections[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ)
            self._read(conn)  # a prober's request has usually come with its connection

    def _room_at(self) -> float:
        """When a new connection can have a slot: now if one is free, else when the oldest connection still
        sending its request has had its grace (INF if every connection is being answered)."""
        if len(self._connections) < self.max_connections:
            return 0.0
        oldest = next((c for c in self._connections.values() if c.out is None), None)
        return INF if oldest is None else oldest.accepted + EVICTION_GRACE

    def _make_room(self) -> bool:
        """Free a slot by closing the oldest connection still sending its request, past its grace, unless
        its request has come meanwhile (then it is answered instead)."""
        while len(self._connections) >= self.max_connections:
            oldest = next((c for c in self._connections.values() if c.out is None), None)
            if oldest is None or oldest.accepted + EVICTION_GRACE > time.monotonic():
                return False
            self._read(oldest)
            if oldest.out is None and oldest.sock in self._connections:
                self._close(oldest, reset=True)
        return True

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the client
            self._close(conn, reset=True)
            return
        try:
            if data and not conn.feed(data):
                return
            if not data:
                conn.end()
        except _RequestTooLarge:
            self._answer(conn, "GET", (400, b"request too large\n", "text/plain"))
            return
        self._respond(conn)

    def _respond(self, conn: _Connection) -> None:
        request = conn.request or []
        if len(request) != 3 or not request[2].startswith("HTTP/"):
            self._answer(conn, "GET", (400, b"bad request\n", "text/plain"))
            return
        method, target = request[0], request[1]
        if method not in ("GET", "HEAD"):
            self._answer(conn, method, (405, b"only GET\n", "text/plain"))
            return
        path = target.split("?", 1)[0]
        route = self.routes.get(path)
        try:
            answer = route() if route else (404, b"not found\n", "text/plain")
        except Exception:  # one path's fault must not end the server that also answers the probes
            log.exception("%s: answering %s", self.thread.name, path)
            answer = (500, b"internal error\n", "text/plain")
        self._answer(conn, method, answer)

    def _answer(self, conn: _Connection, method: str, answer: Answer) -> None:
        code, body, content_type = answer
        head = (
            f"HTTP/1.1 {code} {REASONS.get(code, '')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        conn.out = memoryview(head.encode("latin-1") + (b"" if method == "HEAD" else body))
        self._selector.modify(conn.sock, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the client went away
            self._close(conn, reset=True)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            # What the client sent beyond the headers (a body), read now: closing a socket with unread
            # bytes resets the connection, and the client could lose the answer with it.
            with contextlib.suppress(OSError):
                conn.sock.recv(65536)
            self._close(conn, reset=False)

    def _close(self, conn: _Connection, *, reset: bool) -> None:
        del self._connections[conn.sock]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        if reset:
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        conn.sock.close()
