"""Where the API server is and who this writer is to it: all a request needs from a client configuration.

Both configurations (``incluster``, ``kubeconfig``) come down to a ``Connection``, and ``client`` sends
every request over the HTTP connections it opens. The transport is the standard library's
``http.client``: this writer makes five kinds of request to one resource and reads their JSON as dicts,
and the official client's request layer (its package, models, pydantic, dateutil, a thread pool) cost
about 12 MiB of every node's memory as a transport alone, urllib3 under it about 5 MiB more than
``http.client`` (measurements in docs/nfd-lite.md, Memory). The official client's kubeconfig loader is
still what reads ``--kubeconfig`` (exec credential plugins, OIDC, token files), loaded only in that mode.
Each connection bounds its request in time (``Deadline``); ``client`` bounds the answer's size.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

# TCP keep-alive as client-go dials the API server (30 s idle; Go's probe interval and count, 15 s and 9),
# so an idle watch whose peer vanished is noticed within about 3 minutes instead of never.
KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 9))


class DeadlinePassed(TimeoutError):
    """The request's deadline passed before its answer was complete."""


class Deadline:
    """When the request in flight on one connection must be over (``time.monotonic()``), and how many bytes
    of its answer have come in since that was set. Every connect, send and receive waits at most until
    then: a socket timeout alone bounds each read, not their sum, so an answer dripped a byte a second
    would hold the request for ever. With no deadline set, each operation waits up to ``timeout``."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.at: float | None = None
        self.received = 0

    def until(self, at: float) -> None:
        self.at, self.received = at, 0

    def left(self) -> float:
        """Seconds the next socket operation may wait; DeadlinePassed when none are left."""
        if self.at is None:
            return self.timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("the deadline passed")
        return left


class Credentials(Protocol):
    """What proves this writer's identity on each request."""

    def authorization(self) -> str | None:
        """The Authorization header's value for the next request (a rotated token is picked up here)."""
        ...

    def renew(self) -> None:
        """The server answered 401: read or fetch the credential again before the one retry."""
        ...


@dataclass(frozen=True)
class Connection:
    """An API server and how to reach it. ``url`` is ``scheme://host[:port]``, optionally with a path
    prefix as a kubeconfig server may have; ``ca_file`` None means the system's CAs; ``verify`` False only
    where a kubeconfig says insecure-skip-tls-verify; ``server_name`` is a kubeconfig's tls-server-name;
    ``proxy`` a kubeconfig's proxy-url (an HTTP proxy; HTTPS goes through it by CONNECT)."""

    url: str
    credentials: Credentials | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_name: str | None = None
    proxy: str | None = None

    @property
    def prefix(self) -> str:
        """The URL's path, which every request path is appended to."""
        return urlsplit(self.url).path.rstrip("/")

    def open(self, timeout: float) -> BoundedConnection:
        """A new connection (connected on its first request) whose socket operations time out after
        ``timeout`` seconds, or at its ``deadline`` once one is set."""
        parts = urlsplit(self.url)
        host, port = parts.hostname or "", parts.port
        target, target_port = host, port
        if self.proxy:
            proxy = urlsplit(self.proxy)
            target, target_port = proxy.hostname or "", proxy.port
        if parts.scheme == "http":
            plain = _KeepAliveHTTP(target, target_port, timeout=timeout)
            if self.proxy:
                plain.set_tunnel(host, port)
            return plain
        secure = _KeepAliveHTTPS(
            target,
            target_port,
            timeout=timeout,
            context=self.tls_context,
            server_name=self.server_name or host,
        )
        if self.proxy:
            secure.set_tunnel(host, port)
        return secure

    @cached_property
    def tls_context(self) -> ssl.SSLContext:
        """One TLS context for every connection (the CA bundle loaded once); ``check_tls`` has already
        proved at start-up that its files load."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file and self.key_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _keepalive(sock: socket.socket) -> None:
    """No Nagle (requests are one write each) and keep-alive probes, leaving out what the platform lacks."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE:
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class _DeadlineReader(io.RawIOBase):
    """An answer's bytes from ``raw`` (the socket's own reader), each receive waiting only until the
    deadline, and counted."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self.raw, self.sock, self.deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        self.sock.settimeout(self.deadline.left())
        try:
            count = self.raw.readinto(buffer) or 0
        except TimeoutError as err:
            if self.deadline.at is None:
                raise
            raise DeadlinePassed("the deadline passed") from err
        self.deadline.received += count
        return count

    def close(self) -> None:
        self.raw.close()  # lets the socket close once the connection has let go of it too
        super().close()


class BoundedConnection(http.client.HTTPConnection):
    """An HTTP(S) connection whose request must be over by ``deadline``: connecting, sending the request
    and reading every byte of the answer (status line, headers, body) all stop there. ``reading`` is the
    socket the last answer is read from, which stays open after the connection has let go of it when the
    server said ``Connection: close``."""

    deadline: Deadline
    reading: socket.socket | None

    def _bound(self) -> None:
        """Set up what this class adds (called from each subclass's ``__init__``)."""
        self.deadline = deadline = Deadline(self.timeout or 0.0)
        self.reading = None
        connection = self

        # http.client builds each answer itself from the socket alone, so the deadline comes with a class
        # of this connection's own.
        class Answer(http.client.HTTPResponse):
            """An answer read only until the connection's deadline."""

            def __init__(
                self,
                sock: socket.socket,
                debuglevel: int = 0,
                method: str | None = None,
                url: str | None = None,
            ) -> None:
                super().__init__(sock, debuglevel, method, url)
                self.fp = io.BufferedReader(_DeadlineReader(self.fp.detach(), sock, deadline))
                connection.reading = sock

        self.response_class = Answer

    def send(self, data: Any) -> None:
        if self.sock is not None:  # a kept connection: its socket still has the last request's timeout
            self.sock.settimeout(self.deadline.left())
        super().send(data)

    def abort(self) -> None:
        """Unblock a read of this connection's answer from another thread (the answer fails)."""
        sock = self.reading or self.sock
        if sock is not None:
            # socket's own shutdown: SSLSocket's would also drop its TLS state under the reading thread
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _KeepAliveHTTP(BoundedConnection):
    def __init__(self, host: str, port: int | None, *, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._bound()

    def connect(self) -> None:
        self.timeout = self.deadline.left()  # what the TCP connect may wait
        super().connect()
        _keepalive(self.sock)


class _KeepAliveHTTPS(BoundedConnection, http.client.HTTPSConnection):
    """HTTPS whose certificate is checked against ``server_name`` (the host, or a kubeconfig's
    tls-server-name), over a socket with keep-alive probes."""

    def __init__(
        self, host: str, port: int | None, *, timeout: float, context: ssl.SSLContext, server_name: str
    ) -> None:
        http.client.HTTPSConnection.__init__(self, host, port, timeout=timeout, context=context)
        self.server_name = server_name
        self.tls_context = context
        self._bound()

    def connect(self) -> None:
        self.timeout = self.deadline.left()
        http.client.HTTPConnection.connect(self)  # TCP, and the proxy's CONNECT when tunnelling
        _keepalive(self.sock)
        # The handshake as a whole waits at most the socket's timeout (CPython bounds it, not each read).
        self.sock.settimeout(self.deadline.left())
        self.sock = self.tls_context.wrap_socket(self.sock, server_hostname=self.server_name)
