"""Waiting for what a test expects, and writing feature files as gfd does; shared by the tests that run
the writer against the real control plane and against the fault-injecting server."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def eventually(predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.01) -> bool:
    """True as soon as ``predicate()`` is, polling every ``interval`` seconds; its last answer after
    ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def write_atomic(directory: Path, name: str, text: str) -> None:
    """What gfd does: a temp file, then a rename into place."""
    temp = directory / f".{name}.tmp"
    temp.write_text(text)
    os.replace(temp, directory / name)
