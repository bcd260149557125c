"""Faults injected on demand: the next N matching requests misbehave in a chosen way."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class Fault:
    """What to do to matching requests.

    method/path/watch select requests (None matches any; a path ending in `*` is a prefix). Exactly one
    effect is usually set: `status` (answer with that code and a Status body, `retry_after` adds the
    Retry-After header), `reset` (close the connection without an answer), `gone` (a watch gets an ERROR
    event with code 410, as for an expired resourceVersion). `delay` (seconds) may be combined with any
    of them, or used alone to slow requests that then proceed normally. `count` None means forever.
    """

    method: str | None = None
    path: str | None = None
    watch: bool | None = None
    status: int | None = None
    retry_after: int | None = None
    message: str | None = None
    delay: float = 0.0
    reset: bool = False
    gone: bool = False
    count: int | None = 1
    hits: int = 0

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        if self.count is not None and self.hits >= self.count:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        if self.path is None:
            return True
        return path.startswith(self.path[:-1]) if self.path.endswith("*") else path == self.path

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.hits >= self.count


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, method: str, path: str, is_watch: bool) -> Fault | None:
        """The first fault matching this request, counted as used."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path, is_watch):
                    fault.hits += 1
                    return fault
            return None
