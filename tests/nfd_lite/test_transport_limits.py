"""The transport against a hostile API server: an answer too large, without an end, or dripped a byte a
second fails promptly with one line saying which cap or deadline it passed, the writer's retry policy
tries again, and the client's memory stays bounded.

The server answers every request the same hostile way; the client (NodeApi under RetryPolicy, two
attempts) runs in a child Python that reports its error and the growth of its own peak RSS, so the
measure is the client's alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.tls import make_certificate, server_context

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
# An "endless" answer ends here, 16 times the client's cap, so that a client without a cap (before the
# fix) still comes to an end and shows its growth instead of being killed.
ENDLESS = 256 * MiB
# The client's peak RSS may grow this much while reading one hostile answer: the 16 MiB cap and the
# buffers around it, with a wide margin (without the cap, a 256 MiB answer grew it by over 500 MiB).
GROWTH_BOUND_MIB = 64
# A child that takes this long has hung: with a 2 s request deadline each attempt ends in about 2 s.
CHILD_TIMEOUT = 90.0
MAX_CONNECTIONS = 8
BOOKMARK = b'{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"7"}}}\n'
# A Node's answer and a watch event, long enough that dripping them a byte a second outlasts
# CHILD_TIMEOUT several times.
DRIPPED = b'{"kind": "Node", "metadata": {"name": "node-a"}}' + b" " * 600
DRIPPED_EVENT = BOOKMARK[:-1] + b" " * 600 + b"\n"


class Gone(Exception):
    """The client left (or the server is stopping): this answer ends here."""


class Out:
    """One connection's sending side."""

    def __init__(self, sock: socket.socket, stop: threading.Event) -> None:
        self.sock = sock
        self.stop = stop

    def send(self, data: bytes) -> None:
        if self.stop.is_set():
            raise Gone
        try:
            self.sock.sendall(data)
        except OSError as err:  # the client closed its end, as a capped client does
            raise Gone from err

    def pause(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Gone

    def drip(self, data: bytes, *, chunked: bool = False) -> None:
        """``data`` one byte a second (each byte its own chunk where ``chunked``)."""
        for index in range(len(data)):
            byte = data[index : index + 1]
            self.send(chunk(byte) if chunked else byte)
            self.pause(1.0)

    def stream(self, total: int, *, chunked: bool) -> None:
        """``total`` bytes of an unterminated JSON string as fast as the client takes them."""
        piece = b"x" * (64 * 1024)
        for _ in range(total // len(piece)):
            self.send(chunk(piece) if chunked else piece)
        if chunked:
            self.send(b"0\r\n\r\n")


def head(status: int = 200, *, close: bool = False, **headers: str) -> bytes:
    reason = {200: "OK", 500: "Internal Server Error"}[status]
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json"]
    lines += ["Connection: close"] if close else []
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


# The hostile answers: each writes one whole answer (or as much of it as the client takes).
def huge_with_length(out: Out) -> None:
    out.send(head(Content_Length=str(ENDLESS)))
    out.stream(ENDLESS, chunked=False)


def endless_chunked(out: Out) -> None:
    """Also what a watch reads as one endless event line."""
    out.send(head(Transfer_Encoding="chunked"))
    out.stream(ENDLESS, chunked=True)


def endless_error(out: Out) -> None:
    out.send(head(500, Transfer_Encoding="chunked"))
    out.stream(ENDLESS, chunked=True)


def dripped_body(out: Out) -> None:
    out.send(head(Content_Length=str(len(DRIPPED))))
    out.drip(DRIPPED)


def dripped_head(out: Out) -> None:
    out.drip(head(Content_Length=str(len(DRIPPED)), X_Padding="p" * 600) + DRIPPED)


def dripped_watch_line(out: Out) -> None:
    out.send(head(Transfer_Encoding="chunked") + chunk(BOOKMARK))
    out.drip(DRIPPED_EVENT, chunked=True)


def bookmarks_for_ever(out: Out) -> None:
    """A watch the server never ends, however short its timeoutSeconds: a bookmark every 0.1 s."""
    out.send(head(Transfer_Encoding="chunked"))
    while True:
        out.send(chunk(BOOKMARK))
        out.pause(0.1)


def watch_then_close(out: Out) -> None:
    """Not hostile: a watch answered with ``Connection: close`` (an HTTP/1.0 proxy's way), two events, and
    its end."""
    out.send(head(close=True, Transfer_Encoding="chunked") + chunk(BOOKMARK) + chunk(BOOKMARK))
    out.send(b"0\r\n\r\n")


class HostileServer:
    """HTTP(S) on 127.0.0.1 answering every request with ``answer``, one thread per connection (at most
    MAX_CONNECTIONS at a time, more are closed at once); on exit every socket is closed and every thread
    joined."""

    def __init__(self, answer: Callable[[Out], None], context: ssl.SSLContext | None) -> None:
        self.answer = answer
        self.context = context
        self.requests = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # so that the acceptor sees the stop
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)

    def __enter__(self) -> HostileServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._acceptor.join(10)
        self._listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):  # already gone
                    sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)
        assert not any(t.is_alive() for t in [self._acceptor, *self._threads]), "a server thread hung"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed: stopping
            if not self._slots.acquire(blocking=False):
                sock.close()
                continue
            thread = threading.Thread(target=self._serve, args=(sock,), name="hostile-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)
        try:
            sock.settimeout(10.0)  # a client that neither reads nor leaves cannot hold this thread
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_side=True)
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 65536:
                data = sock.recv(4096)
                if not data:
                    return
                request += data
            with self._lock:
                self.requests += 1
            self.answer(Out(sock, self._stop))
        except (Gone, OSError):
            pass  # the client left: as it should once it refuses the answer
        finally:
            with self._lock:
                self._open.discard(sock)
            sock.close()
            self._slots.release()


# The client: the in-cluster configuration (or a plain-HTTP connection) to the server, the writer's
# retry policy around one request, and how far its peak RSS rose above its resident size before.
CHILD = r"""
import json, sys, time
from pathlib import Path

from nfd_lite.api.client import NodeApi
from nfd_lite.api.connection import Connection
from nfd_lite.api.incluster import in_cluster_connection
from nfd_lite.api.retry import RetryPolicy

case = json.loads(sys.argv[1])
if case["scheme"] == "https":
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(case["port"])}
    connection = in_cluster_connection(Path(case["sa_dir"]), environ)
    connection.tls_context  # the CA loaded before the baseline
else:
    connection = Connection(f"http://127.0.0.1:{case['port']}")
api = NodeApi(connection, "node-a", request_timeout=2.0)
api.watch_grace = 1.0
if case["op"] == "watch":
    def request():
        events = list(api.watch("1", case["timeout_seconds"], silence=case["silence"]))
        print(json.dumps({"events": len(events)}))
        return events
else:
    request = api.get_node
def status(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))
# From the resident size now, not the peak so far: an earlier passing peak (imports) would hide growth.
# The peak is VmHWM, this process's own: getrusage's ru_maxrss keeps the parent's (pytest's) across the
# fork and exec.
before = status("VmRSS:")
started = time.monotonic()
try:
    RetryPolicy(max_backoff=0.1).call(request, case["op"], attempts=2)
    error, message = None, ""
except Exception as err:
    error, message = type(err).__name__, str(err)
growth = (status("VmHWM:") - before) / 1024
print(json.dumps({"error": error, "message": message, "growth_mib": growth,
                  "seconds": time.monotonic() - started}))
"""


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    """The server's TLS context, and a service-account directory (token, ca.crt) that trusts it."""
    directory = tmp_path_factory.mktemp("sa")
    cert, key = make_certificate(directory)
    (directory / "ca.crt").write_bytes(cert.read_bytes())
    (directory / "token").write_text("t\n")
    return server_context(cert, key), directory


@pytest.fixture
def hostile(tls: tuple[ssl.SSLContext, Path]) -> Iterator[Callable[..., dict[str, Any]]]:
    """Run the client once against a server answering with ``answer``; what the client reported."""

    def run(
        answer: Callable[[Out], None], op: str = "get", scheme: str = "https", **case: Any
    ) -> dict[str, Any]:
        context, sa_dir = tls
        server = HostileServer(answer, context if scheme == "https" else None)
        with server:
            case |= {"op": op, "scheme": scheme, "port": server.port, "sa_dir": str(sa_dir)}
            case.setdefault("timeout_seconds", 60)
            case.setdefault("silence", None)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            command = [sys.executable, "-c", CHILD, json.dumps(case)]
            try:
                child = subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT
                )
            except subprocess.TimeoutExpired:
                child = None  # killed by run()
            if child is None:
                pytest.fail(f"the request did not fail within {CHILD_TIMEOUT:.0f} s: it hangs")
            assert child.returncode == 0, child.stderr
            result: dict[str, Any] = {}
            for line in child.stdout.strip().splitlines():
                result |= json.loads(line)
            result["requests"] = server.requests
            return result

    yield run


def check(result: dict[str, Any], message: str) -> None:
    """The request failed as an unusable answer, with one line matching ``message``, after the retry
    policy tried it twice (the writer goes on, it does not crash), within the memory bound."""
    assert result["error"] == "UnusableAnswer", result
    assert re.search(message, result["message"]), result["message"]
    assert "\n" not in result["message"]
    assert result["requests"] == 2, "the retry policy tries again"
    assert result["growth_mib"] < GROWTH_BOUND_MIB, f"peak RSS grew {result['growth_mib']:.0f} MiB"


def test_a_content_length_over_the_cap_is_refused_before_reading(hostile: Callable[..., Any]) -> None:
    # The size the message names is the header's: the answer is refused before its body is read.
    check(
        hostile(huge_with_length),
        r"^GET /api/v1/nodes/node-a: the answer is 268435456 bytes, over the 16 MiB cap$",
    )


def test_an_endless_chunked_answer_is_cut_at_the_cap(hostile: Callable[..., Any]) -> None:
    check(hostile(endless_chunked), r"^GET /api/v1/nodes/node-a: the answer passed the 16 MiB cap")


def test_an_endless_error_answer_is_cut_at_the_cap(hostile: Callable[..., Any]) -> None:
    check(hostile(endless_error), r"^GET /api/v1/nodes/node-a: the answer passed the 16 MiB cap")


def test_an_endless_watch_line_is_cut_at_the_cap(hostile: Callable[..., Any]) -> None:
    check(hostile(endless_chunked, op="watch"), r"^watch: an event passed the 16 MiB cap")


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_dripped_answer_ends_at_the_request_deadline(hostile: Callable[..., Any], scheme: str) -> None:
    check(
        hostile(dripped_body, scheme=scheme),
        r"^GET /api/v1/nodes/node-a: the answer was still incomplete at the 2 s request deadline",
    )


def test_a_dripped_answer_head_ends_at_the_request_deadline(hostile: Callable[..., Any]) -> None:
    check(
        hostile(dripped_head),
        r"^GET /api/v1/nodes/node-a: the answer was still incomplete at the 2 s request deadline",
    )


def test_a_dripped_watch_line_ends_at_the_watch_silence(hostile: Callable[..., Any]) -> None:
    check(
        hostile(dripped_watch_line, op="watch", silence=2.0),
        r"^watch: an event was still incomplete 2 s after the last one",
    )


def test_a_watch_the_server_never_ends_is_dropped(hostile: Callable[..., Any]) -> None:
    # timeoutSeconds=1 and (in the child) a grace of 1 s: the watch ends 2 s after it started.
    check(
        hostile(bookmarks_for_ever, op="watch", timeout_seconds=1, silence=2.0),
        r"^watch: still open 1 s after its timeoutSeconds=1",
    )


def test_a_watch_answered_with_connection_close_is_read(hostile: Callable[..., Any]) -> None:
    """The connection lets go of its socket at once; the watch reads its events from the answer's."""
    result = hostile(watch_then_close, op="watch")
    assert result["error"] is None, result
    assert result["events"] == 2
