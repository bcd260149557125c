"""The Inbox (nfd_lite/node/inbox.py): what the watching threads hand the main loop, and when it wakes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nfd_lite.node.inbox import Inbox


def node(version: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "gpu-1", "resourceVersion": version, "labels": labels}}


def later(delay: float, action: Callable[[], object]) -> None:
    threading.Timer(delay, action).start()


def test_an_older_node_never_replaces_a_newer_one() -> None:
    inbox = Inbox(debounce=0.01, debounce_cap=0.1)
    inbox.node_seen(node("10", a="new"))
    inbox.node_seen(node("9", a="old"))
    taken = inbox.take_node()
    assert taken is not None
    assert (taken.resource_version, dict(taken.labels)) == ("10", {"a": "new"})
    inbox.node_seen(node("9", a="old"))
    assert inbox.wait(time.monotonic()) == (False, False)  # nothing newer: no reason for a pass


def test_a_newer_node_wakes_the_loop_until_a_pass_takes_it() -> None:
    inbox = Inbox(debounce=0.01, debounce_cap=0.1)
    later(0.05, lambda: inbox.node_seen(node("3")))
    started = time.monotonic()
    assert inbox.wait(started + 10) == (False, True)
    assert time.monotonic() - started < 5
    assert inbox.wait(time.monotonic()) == (False, True)  # still not taken
    assert inbox.node is not None and inbox.node.resource_version == "3"
    inbox.take_node()
    assert inbox.wait(time.monotonic() + 0.05) == (False, False)


def test_a_burst_of_file_events_is_due_once_after_the_debounce() -> None:
    inbox = Inbox(debounce=0.05, debounce_cap=1.0)
    for _ in range(3):
        inbox.files_changed()
    started = time.monotonic()
    assert inbox.wait(started + 10) == (True, False)
    assert 0.04 <= time.monotonic() - started < 5
    assert inbox.wait(time.monotonic() + 0.1) == (False, False)


def test_wake_ends_a_wait_with_nothing_due() -> None:
    inbox = Inbox(debounce=0.01, debounce_cap=0.1)
    later(0.05, inbox.wake)
    started = time.monotonic()
    assert inbox.wait(started + 10) == (False, False)
    assert time.monotonic() - started < 5
