"""The own-Node watch: list the Node, watch it from the list's resourceVersion, and list again when the
server says that version is too old (410 Gone). Runs on its own thread; every Node goes to the Inbox."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import ApiError, Gone, NotFound
from nfd_lite.api.retry import RetryPolicy, Stopped
from nfd_lite.node.inbox import Inbox

log = logging.getLogger(__name__)


class NodeWatch:
    def __init__(
        self,
        api: NodeApi,
        node_name: str,
        timeout: int,
        retry: RetryPolicy,
        inbox: Inbox,
        *,
        silence: float | None = None,
        seen: Callable[[], None] | None = None,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.timeout = timeout
        self.retry = retry
        self.inbox = inbox
        self.silence = silence  # a watch quiet this long (not even a bookmark) is presumed cut off
        self.resource_version: str | None = None  # where the next watch resumes; None: list first
        self.thread: threading.Thread | None = None
        # Called for the listed Node and every event, bookmarks included: the watch is alive and current.
        self._seen = seen or (lambda: None)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="nfd-lite-watch", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread is None or self.thread.is_alive()

    def _once(self) -> None:
        if self.resource_version is None:
            node, rv = self.api.list_node()
            if node is None:
                raise NotFound(404, f"node {self.node_name!r} not found", verb="list")
            self.inbox.node_seen(node)
            self._seen()
            self.resource_version = rv
        try:
            for event in self.api.watch(self.resource_version, self.timeout, silence=self.silence):
                obj = event.get("object") or {}
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if rv:
                    self.resource_version = rv
                self._seen()
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self.inbox.node_seen(obj)
                elif event.get("type") == "DELETED":
                    log.warning("node %s was deleted", self.node_name)
        except Gone:
            self.resource_version = None  # too old to resume: list again
            raise

    def _loop(self) -> None:
        stop = self.retry.stop
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.retry.call(self._once, "watch")
            except Stopped:
                return
            except ApiError:
                if stop.is_set():
                    return
            # A watch the server (or a proxy) ends at once, again and again, must not become a busy loop.
            if time.monotonic() - started < 1.0 and stop.wait(1.0):
                return
