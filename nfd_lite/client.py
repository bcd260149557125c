"""A thin own-Node client: JSON over one urllib3 pool (``connection`` says why not the official client's
request layer), handed back as dicts. Every request carries a timeout. Only the start-up self-check names
another node, in a list of one and a dry-run patch that the server never stores (``probe_other_node``). A
failure is raised as the ``apierrors`` class saying what it means.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from nfd_lite.apierrors import ConnectionFailed, api_error, response_error
from nfd_lite.connection import Connection

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "nfd-lite/0.1"
FIELD_MANAGER = "nfd-lite"
_NODES = "/api/v1/nodes"
# What a broken or timed-out connection raises: socket and TLS errors are OSErrors, a garbled or cut-off
# answer an HTTPException.
_NO_ANSWER = (OSError, http.client.HTTPException)


class NodeApi:
    """GET/PATCH/LIST/WATCH of one Node. Retries live in the caller; this only classifies failures.

    Each thread keeps one connection alive for its requests (the main loop's passes, the watch thread's
    lists); each watch has a connection of its own, closed when the watch ends. A connection that failed
    is dropped, and the next request opens a new one."""

    def __init__(self, connection: Connection, node_name: str, *, request_timeout: float = 10.0) -> None:
        self.connection = connection
        self.node_name = node_name
        self.request_timeout = request_timeout
        self._path = "/api/v1/nodes/" + quote(node_name, safe="")
        self._kept = threading.local()
        self._watch_lock = threading.Lock()
        self._watching: http.client.HTTPConnection | None = None
        # Called on every answer of the API server (any HTTP response, each watch event or bookmark): how
        # the writer knows it is reachable (retry.Outage).
        self.heard: Callable[[], None] = lambda: None

    def abort_watch(self) -> None:
        """Unblock a watch read from another thread (used on shutdown)."""
        with self._watch_lock:
            watching = self._watching
        if watching is not None and watching.sock is not None:
            try:
                watching.sock.shutdown(socket.SHUT_RDWR)
            except OSError as err:  # already closed: nothing to unblock
                log.debug("closing the watch: %s", err)

    def close(self) -> None:
        kept: http.client.HTTPConnection | None = getattr(self._kept, "connection", None)
        if kept is not None:
            kept.close()
            self._kept.connection = None

    def _kept_connection(self) -> http.client.HTTPConnection:
        kept: http.client.HTTPConnection | None = getattr(self._kept, "connection", None)
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
        """One request on this thread's kept connection; its JSON answer."""
        verb = "list" if path == _NODES else method.lower()
        connection = self._kept_connection()
        try:
            answer = self._answer(connection, verb, method, path, query, body, content_type).read()
        except _NO_ANSWER as err:
            connection.close()
            self._kept.connection = None
            raise ConnectionFailed(0, f"{method} {path}: {type(err).__name__}: {err}", verb=verb) from err
        try:
            return json.loads(answer)
        except ValueError as err:
            raise ConnectionFailed(0, f"{method} {path}: undecodable answer: {err}", verb=verb) from err

    def _answer(
        self,
        connection: http.client.HTTPConnection,
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
            self.heard()
            if 200 <= response.status < 300:
                return response
            answer = response.read()
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

    def other_node(self) -> dict[str, Any] | None:
        """Some Node other than this one (None on a one-node cluster), for the self-check's probe."""
        query = [("fieldSelector", f"metadata.name!={self.node_name}"), ("limit", "1")]
        result = self._send("GET", _NODES, query=query)
        items = result.get("items") or []
        node: dict[str, Any] | None = items[0] if items else None
        return node

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
        """Events of the own-node watch until the server ends it. Raises Gone when expired, and
        ConnectionFailed when nothing (not even a bookmark) arrives for ``silence`` seconds."""
        query = [
            self._selector(),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        # Connect quickly; allow the read to wait as long as the server may keep the watch open.
        connection = self.connection.open(self.request_timeout)
        with self._watch_lock:
            self._watching = connection
        try:
            try:
                response = self._answer(connection, "watch", "GET", _NODES, query)
                # Let each read wait up to ``silence``, or as long as the server may keep the watch open: a
                # stream cut off without a FIN or RST (a dropped route, a policy dropping packets) is then
                # noticed.
                assert connection.sock is not None
                connection.sock.settimeout(silence if silence is not None else timeout_seconds + 30.0)
                for line in response:
                    if not line.strip():
                        continue
                    self.heard()
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
            except ValueError as err:
                raise ConnectionFailed(0, f"watch: undecodable event: {err}", verb="watch") from err
        finally:
            with self._watch_lock:
                self._watching = None
            connection.close()
