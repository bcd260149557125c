"""Feature-directory watching: inotify (or polling) events are hints that make the service rescan.

Events are never trusted to be complete: a directory deleted and recreated leaves an inotify watch
alive but silent, a queue overflow only logs, so ``DirWatcher.refresh`` re-checks each directory's
identity every second and the service also rescans periodically.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)

# Only what can change a feature file's content; our own reads (open/close-nowrite) must not echo back.
_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]


class Debouncer:
    """Coalesces a burst of events into one sync without ever losing the last one.

    A sync is due ``delay`` after the latest event, but never later than ``cap`` after the first
    event of the burst, so a steady stream of events cannot postpone syncing forever (the starvation
    a pure trailing-edge debounce has). Events arriving while a sync runs start a new burst.
    Times are ``time.monotonic()`` seconds; not thread-safe by itself (the service holds a lock).
    """

    def __init__(self, delay: float, cap: float) -> None:
        self.delay = delay
        self.cap = max(cap, delay)
        self._first: float | None = None
        self._last = 0.0

    def note(self, now: float) -> None:
        if self._first is None:
            self._first = now
        self._last = now

    def deadline(self) -> float | None:
        if self._first is None:
            return None
        return min(self._last + self.delay, self._first + self.cap)

    def take(self, now: float) -> bool:
        """True (and the burst is consumed) when a sync is due at ``now``."""
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return False
        self._first = None
        return True


class _Handler(FileSystemEventHandler):
    def __init__(self, notify: Callable[[], None]) -> None:
        self.notify = notify

    def on_any_event(self, event: FileSystemEvent) -> None:
        names = [os.path.basename(os.fsdecode(event.src_path))]
        if event.event_type == "moved":
            names.append(os.path.basename(os.fsdecode(event.dest_path)))
        if all(name.startswith(".") for name in names):
            return  # temp files of atomic writers; the rename into place is what counts
        self.notify()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if os.path.isdir(path) else None


class DirWatcher:
    """One observer watching every feature directory that exists; missing ones are waited for."""

    def __init__(
        self,
        directories: list[Path],
        notify: Callable[[], None],
        *,
        poll: bool = False,
        poll_interval: float = 1.0,
    ) -> None:
        self.directories = directories
        self.notify = notify
        self.observer: BaseObserver = PollingObserver(timeout=poll_interval) if poll else Observer()
        self._handler = _Handler(notify)
        self._watches: dict[Path, tuple[tuple[int, int], ObservedWatch]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        self.observer.start()
        self.refresh()

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=5)

    def refresh(self) -> bool:
        """(Re)attach watches to directories that appeared or were replaced; True if any changed,
        in which case ``notify`` has been called so the service rescans."""
        changed = False
        with self._lock:
            for directory in self.directories:
                identity = _identity(directory)
                current = self._watches.get(directory)
                if current is not None and current[0] == identity:
                    continue
                if current is not None:
                    self._unschedule(current[1])
                    del self._watches[directory]
                    log.info(
                        "feature directory %s %s", directory, "was replaced" if identity else "disappeared"
                    )
                if identity is not None:
                    try:
                        watch = self.observer.schedule(self._handler, str(directory), event_filter=_EVENTS)
                    except OSError as err:
                        log.warning("cannot watch %s: %s", directory, err)
                        continue
                    self._watches[directory] = (identity, watch)
                    log.info("watching %s", directory)
                changed = True
        if changed:
            self.notify()
        return changed

    def _unschedule(self, watch: ObservedWatch) -> None:
        try:
            self.observer.unschedule(watch)
        except (KeyError, OSError) as err:
            log.debug("unschedule: %s", err)

    def watching(self) -> list[Path]:
        with self._lock:
            return sorted(self._watches)
