"""A thin own-Node client: JSON over ``http.client`` (``connection`` says why not the official client's
request layer), handed back as dicts. Every request has one deadline and every answer a size cap, so a
broken or hostile server costs bounded time and memory. Only the start-up self-check names another node,
in a list of two and a dry-run patch that the server never stores (``probe_other_node``). A failure is
raised as the ``errors`` class saying what it means.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from nfd_lite.api.connection import BoundedConnection, Connection, Deadline, DeadlinePassed
from nfd_lite.api.errors import ConnectionFailed, UnusableAnswer, api_error, response_error

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "nfd-lite/0.1"
FIELD_MANAGER = "nfd-lite"
_NODES = "/api/v1/nodes"
# What a broken or timed-out connection raises: socket and TLS errors are OSErrors, a garbled or cut-off
# answer an HTTPException.
_NO_ANSWER = (OSError, http.client.HTTPException)
# The most one answer, or one watch event, may hold. Any Node is bounded by what etcd stores (1.5 MiB per
# object by default), and its JSON is at most a few times its stored size; the writer's own Node, with its
# 1,000-label cap and managedFields, is a few hundred KiB. 16 MiB leaves room for an etcd that allows
# bigger objects, while a broken or hostile server can cost no more than that (a 256 MiB answer read
# whole once took the writer to 534 MiB, an endless one to 3.8 GiB in 12 s).
MAX_ANSWER_BYTES = 16 * 1024 * 1024
_CAP = f"{MAX_ANSWER_BYTES // (1024 * 1024)} MiB"
_PIECE = 64 * 1024  # an answer without a Content-Length is read this much at a time
# A watch the server has not ended this long after its timeoutSeconds is dropped and opened again.
WATCH_GRACE = 30.0


class NodeApi:
    """GET/PATCH/LIST/WATCH of one Node. Retries live in the caller; this only classifies failures.

    Each thread keeps one connection alive for its requests (the main loop's passes, the watch thread's
    lists); each watch has a connection of its own, closed when the watch ends. A connection that failed
    is dropped, and the next request opens a new one."""

    watch_grace = WATCH_GRACE

    def __init__(
        self,
        connection: Connection,
        node_name: str,
        *,
        request_timeout: float = 10.0,
        heard: Callable[[], None] = lambda: None,
    ) -> None:
        self.connection = connection
        self.node_name = node_name
        self.request_timeout = request_timeout
        self._path = "/api/v1/nodes/" + quote(node_name, safe="")
        self._kept = threading.local()
        self._watch_lock = threading.Lock()
        self._watching: BoundedConnection | None = None
        # Called on every answer of the API server (any HTTP response, each watch event or bookmark): how
        # the writer knows it is reachable (``Outage.heard``). Given here, as httpx takes event_hooks.
        self._heard = heard

    def abort_watch(self) -> None:
        """Unblock a watch read from another thread (used on shutdown)."""
        with self._watch_lock:
            watching = self._watching
        if watching is not None:
            try:
                watching.abort()
            except OSError as err:  # already closed: nothing to unblock
                log.debug("closing the watch: %s", err)

    def close(self) -> None:
        kept: BoundedConnection | None = getattr(self._kept, "connection", None)
        if kept is not None:
            kept.close()
            self._kept.connection = None

    def _kept_connection(self) -> BoundedConnection:
        kept: BoundedConnection | None = getattr(self._kept, "connection", None)
        if kept is None:
            kept = self._kept.connection = self.connection.open(self.request_timeout)
        return kept

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """One request on this thread's kept connection, over within ``request_timeout`` of its start
        (the 401 retry included); its JSON answer. A connection whose answer was not read to its end is
        dropped, and the next request opens a new one."""
        verb = "list" if path == _NODES else method.lower()
        what = f"{method} {path}"
        connection = self._kept_connection()
        connection.deadline.until(time.monotonic() + self.request_timeout)
        try:
            try:
                response = self._answer(connection, verb, method, path, query, body, content_type)
                answer = _body(response, what, verb)
            except DeadlinePassed as err:
                raise _late(what, connection.deadline, self.request_timeout, verb) from err
            except _NO_ANSWER as err:
                raise ConnectionFailed(0, f"{what}: {type(err).__name__}: {err}", verb=verb) from err
        except ConnectionFailed:
            connection.close()
            self._kept.connection = None
            raise
        try:
            return json.loads(answer)
        except (ValueError, RecursionError) as err:  # RecursionError: nested too deep to decode
            raise UnusableAnswer(0, f"{what}: undecodable answer: {err}", verb=verb) from err

    def _answer(
        self,
        connection: BoundedConnection,
        verb: str,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> http.client.HTTPResponse:
        """The 2xx answer to one request, its body not yet read; a 401 renews the credentials and tries
        once more (a rotated token), any other failure is raised as what it means."""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if content_type:
            headers["Content-Type"] = content_type
        target = self.connection.prefix + path + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        credentials = self.connection.credentials
        for attempt in (1, 2):
            authorization = credentials.authorization() if credentials is not None else None
            if authorization:
                headers["Authorization"] = authorization
            connection.request(method, target, body=data, headers=headers)
            response = connection.getresponse()
            self._heard()
            if 200 <= response.status < 300:
                return response
            answer = _body(response, f"{method} {path}", verb)
            if response.status == 401 and attempt == 1 and credentials is not None:
                credentials.renew()
                continue
            raise response_error(response.status, answer, dict(response.headers.items()), verb=verb)
        raise AssertionError("unreachable")

    def get_node(self) -> dict[str, Any]:
        node: dict[str, Any] = self._send("GET", self._path)
        return node

    def patch_node(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """A merge patch; with ``dry_run`` the server runs admission and validation but stores nothing."""
        # The field manager is named explicitly (not derived from the user agent): the admission policy
        # tells the writer's own managedFields entry from everyone else's by this name.
        query = [("fieldManager", FIELD_MANAGER)] + ([("dryRun", "All")] if dry_run else [])
        node: dict[str, Any] = self._send(
            "PATCH", self._path, query=query, body=dict(body), content_type=MERGE_PATCH
        )
        return node

    def other_node(self) -> tuple[dict[str, Any] | None, int]:
        """Some Node other than this one (None on a one-node cluster), for the self-check's probe, and the
        number of Nodes in the cluster: a list of two without a selector, whose remainingItemCount counts
        the rest (a selector would hide it)."""
        result = self._send("GET", _NODES, query=[("limit", "2")])
        items = [i for i in result.get("items") or [] if isinstance(i, dict)]
        others = [i for i in items if (i.get("metadata") or {}).get("name") != self.node_name]
        remaining = (result.get("metadata") or {}).get("remainingItemCount")
        count = len(items) + (remaining if isinstance(remaining, int) and remaining > 0 else 0)
        return (others[0] if others else None), count

    def probe_other_node(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A dry-run merge patch of another Node, always with ``dryRun=All``: the server runs admission and
        stores nothing. The one request that names another node; nothing else may write one."""
        query = [("fieldManager", FIELD_MANAGER), ("dryRun", "All")]
        path = _NODES + "/" + quote(name, safe="")
        node: dict[str, Any] = self._send(
            "PATCH", path, query=query, body=dict(body), content_type=MERGE_PATCH
        )
        return node

    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"metadata.name={self.node_name}")

    def list_node(self) -> tuple[dict[str, Any] | None, str]:
        """The Node (None if it does not exist) and the list's resourceVersion to watch from."""
        result = self._send("GET", _NODES, query=[self._selector()])
        items = result.get("items") or []
        rv = str((result.get("metadata") or {}).get("resourceVersion") or "")
        node = items[0] if items else None
        if node is not None:
            node.setdefault("kind", "Node")
        return node, rv

    def watch(
        self, resource_version: str, timeout_seconds: int, *, silence: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Events of the own-node watch until the server ends it. Raises Gone when expired,
        ConnectionFailed when no event (not even a bookmark) arrives for ``silence`` seconds, and
        UnusableAnswer for an event over the size cap, one still incomplete ``silence`` seconds after the
        last, or a watch still open ``watch_grace`` seconds after ``timeout_seconds``."""
        query = [
            self._selector(),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        connection = self.connection.open(self.request_timeout)
        deadline = connection.deadline
        with self._watch_lock:
            self._watching = connection
        started = time.monotonic()
        deadline.until(started + self.request_timeout)  # for the answer's head, as any request
        ends = started + timeout_seconds + self.watch_grace
        # Each event must be complete within ``silence`` of the one before: a stream cut off without a FIN
        # or RST (a dropped route, a policy dropping packets) is then noticed, and so is one dripped a
        # byte at a time, which a timeout on each read would never see.
        window = silence if silence is not None else math.inf
        response: http.client.HTTPResponse | None = None
        try:
            try:
                try:
                    response = self._answer(connection, "watch", "GET", _NODES, query)
                except DeadlinePassed as err:
                    raise _late("watch", deadline, self.request_timeout, "watch") from err
                while True:
                    due = min(ends, time.monotonic() + window)
                    deadline.until(due)
                    try:
                        line = _event_line(response)
                    except DeadlinePassed as err:
                        if due == ends:
                            message = f"watch: still open {self.watch_grace:g} s after its "
                            message += f"timeoutSeconds={timeout_seconds}"
                            raise UnusableAnswer(0, message, verb="watch") from err
                        if deadline.received:
                            message = f"watch: an event was still incomplete {window:g} s after the last one "
                            message += f"({deadline.received} bytes in)"
                            raise UnusableAnswer(0, message, verb="watch") from err
                        message = f"watch: nothing for {window:g} s, not even a bookmark"
                        raise ConnectionFailed(0, message, verb="watch") from err
                    if not line:
                        return  # the server ended the watch
                    self._heard()
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status_object = event.get("object") or {}
                        code = int(status_object.get("code") or 500)
                        raise api_error(
                            code, str(status_object.get("message") or "watch error"), verb="watch"
                        )
                    yield event
            except _NO_ANSWER as err:
                raise ConnectionFailed(0, f"watch: {type(err).__name__}: {err}", verb="watch") from err
            except (ValueError, RecursionError) as err:
                raise UnusableAnswer(0, f"watch: undecodable event: {err}", verb="watch") from err
        finally:
            with self._watch_lock:
                self._watching = None
            if response is not None:
                response.close()  # after "Connection: close" the answer, not the connection, holds the socket
            connection.close()


def _body(response: http.client.HTTPResponse, what: str, verb: str) -> bytes:
    """The whole body of ``response``, read only up to the cap: a Content-Length over it is refused
    before reading, a body without one is read in pieces and refused as soon as it passes the cap."""
    if response.length is not None:
        if response.length > MAX_ANSWER_BYTES:
            message = f"{what}: the answer is {response.length} bytes, over the {_CAP} cap"
            raise UnusableAnswer(0, message, verb=verb)
        return response.read()
    body = bytearray()
    while piece := response.read(min(_PIECE, MAX_ANSWER_BYTES + 1 - len(body))):
        body += piece
        if len(body) > MAX_ANSWER_BYTES:
            raise UnusableAnswer(0, f"{what}: the answer passed the {_CAP} cap before its end", verb=verb)
    return bytes(body)


def _event_line(response: http.client.HTTPResponse) -> bytes:
    """The watch's next event line (blank lines, which the server may send, skipped); b"" at its end."""
    while True:
        line = response.readline(MAX_ANSWER_BYTES + 1)
        if len(line) > MAX_ANSWER_BYTES:
            raise UnusableAnswer(0, f"watch: an event passed the {_CAP} cap before its end", verb="watch")
        if not line or line.strip():
            return line


def _late(what: str, deadline: Deadline, seconds: float, verb: str) -> ConnectionFailed:
    """What a request whose deadline passed failed of: an answer that did not come, or one too slow."""
    if deadline.received:
        message = f"{what}: the answer was still incomplete at the {seconds:g} s request deadline "
        message += f"({deadline.received} bytes in)"
        return UnusableAnswer(0, message, verb=verb)
    return ConnectionFailed(0, f"{what}: no answer within the {seconds:g} s request deadline", verb=verb)
