"""What the watching threads saw, handed to the main loop: file events (debounced) and the newest Node
the watch delivered.

Threads: watchdog's observer and the Node watch only record here what happened and wake the main loop;
the main loop alone reads files and writes to the API, so there is never more than one write in flight.
The answers to the writer's own requests (its read, its patch) never come through here: the sync pass
keeps them itself (``sync``), so its own write's answer does not wake the loop for another pass. Here as
there, an older resourceVersion never wins over a newer one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from nfd_lite.files.watcher import Debouncer
from nfd_lite.node.reconciler import NodeState


class Inbox:
    def __init__(self, debounce: float, debounce_cap: float) -> None:
        self._cond = threading.Condition()
        self._debounce = Debouncer(debounce, debounce_cap)
        self._node: NodeState | None = None
        self._node_changed = False

    @property
    def node(self) -> NodeState | None:
        """The newest Node the watch delivered; None until it has listed it."""
        return self._node

    def files_changed(self) -> None:
        with self._cond:
            self._debounce.note(time.monotonic())
            self._cond.notify()

    def node_seen(self, node: dict[str, Any]) -> None:
        """A Node as the watch listed or delivered it; one older than the newest known is ignored."""
        state = NodeState.from_object(node)
        with self._cond:
            if state.supersedes(self._node):
                self._node = state
                self._node_changed = True
                self._cond.notify()

    def take_node(self) -> NodeState | None:
        """The newest Node the watch delivered, marking it seen."""
        with self._cond:
            self._node_changed = False
            return self._node

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, until: float) -> tuple[bool, bool]:
        """Wait until ``until`` (monotonic), a debounced burst of file events is due, or the watch delivered
        a Node not yet taken; returns (files due, node changed)."""
        with self._cond:
            now = time.monotonic()
            debounce = self._debounce.deadline()
            if not self._node_changed and not (debounce is not None and debounce <= now):
                deadline = until if debounce is None else min(until, debounce)
                self._cond.wait(max(0.0, deadline - now))
            return self._debounce.take(time.monotonic()), self._node_changed
