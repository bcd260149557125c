"""Where the API server is and who this writer is to it: all a request needs from a client configuration.

Both configurations (``incluster``, ``kubeconfig``) come down to a ``Connection``, and ``client`` sends
every request over the HTTP connections it opens. The transport is the standard library's
``http.client``: this writer makes five kinds of request to one resource and reads their JSON as dicts,
and the official client's request layer (its package, models, pydantic, dateutil, a thread pool) cost
about 12 MiB of every node's memory as a transport alone, urllib3 under it about 5 MiB more than
``http.client`` (measurements in docs/nfd-lite.md, Memory). The official client's kubeconfig loader is
still what reads ``--kubeconfig`` (exec credential plugins, OIDC, token files), loaded only in that mode.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol
from urllib.parse import urlsplit

# TCP keep-alive as client-go dials the API server (30 s idle; Go's probe interval and count, 15 s and 9),
# so an idle watch whose peer vanished is noticed within about 3 minutes instead of never.
KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 9))


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

    def open(self, timeout: float) -> http.client.HTTPConnection:
        """A new connection (connected on its first request) whose socket operations time out after
        ``timeout`` seconds."""
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


class _KeepAliveHTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _keepalive(self.sock)


class _KeepAliveHTTPS(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked against ``server_name`` (the host, or a kubeconfig's
    tls-server-name), over a socket with keep-alive probes."""

    def __init__(
        self, host: str, port: int | None, *, timeout: float, context: ssl.SSLContext, server_name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.server_name = server_name
        self.tls_context = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, and the proxy's CONNECT when tunnelling
        _keepalive(self.sock)
        self.sock = self.tls_context.wrap_socket(self.sock, server_hostname=self.server_name)
