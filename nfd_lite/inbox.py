"""What the watching threads saw, handed to the main loop: file events (debounced) and the newest Node.

Threads: watchdog's observer and the Node watch only record here what happened and wake the main loop;
the main loop alone reads files and writes to the API, so there is never more than one write in flight
and every write is planned against the latest Node it has seen.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from nfd_lite.reconciler import NodeState
from nfd_lite.watcher import Debouncer


def _newer(candidate: str, known: str) -> bool:
    """resourceVersions are opaque, but when both are integers an older event must not win."""
    if candidate.isdigit() and known.isdigit():
        return int(candidate) >= int(known)
    return True


class Inbox:
    def __init__(self, debounce: float, debounce_cap: float) -> None:
        self._cond = threading.Condition()
        self._debounce = Debouncer(debounce, debounce_cap)
        self._node: NodeState | None = None
        self._node_changed = False

    @property
    def node(self) -> NodeState | None:
        return self._node

    def files_changed(self) -> None:
        with self._cond:
            self._debounce.note(time.monotonic())
            self._cond.notify()

    def node_seen(self, node: dict[str, Any], *, own_write: bool = False) -> None:
        """A Node as read, watched or returned by our own patch; an older one than known is ignored. Our
        own write's answer needs no further pass, so it does not wake the loop."""
        state = NodeState.from_object(node)
        with self._cond:
            if self._node is None or _newer(state.resource_version, self._node.resource_version):
                self._node = state
                self._node_changed = not own_write
                self._cond.notify()
            elif own_write:
                self._node_changed = False

    def take_node(self) -> NodeState | None:
        """The newest Node, marking it seen."""
        with self._cond:
            self._node_changed = False
            return self._node

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, until: float) -> tuple[bool, bool]:
        """Wait until ``until`` (monotonic), a debounced burst of file events is due, or the Node changed;
        returns (files due, node changed)."""
        with self._cond:
            now = time.monotonic()
            debounce = self._debounce.deadline()
            if not self._node_changed and not (debounce is not None and debounce <= now):
                deadline = until if debounce is None else min(until, debounce)
                self._cond.wait(max(0.0, deadline - now))
            return self._debounce.take(time.monotonic()), self._node_changed
