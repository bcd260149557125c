"""Reads of one GPU bounded by a deadline, so that a GPU hanging inside the driver cannot stall the pass.

A call into the driver cannot be interrupted, so each GPU's reads run in a thread of their own and the pass
waits for them at most ``timeout`` seconds. A read still running then is left to finish on its own; until it
has, the same GPU is answered "timed out" at once, without a second thread stuck behind the first. Whatever
must wait for every read to end (closing NVML) is handed to ``after_all``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class TimedOut(Exception):
    """The GPU's reads did not end within the deadline (``still``: nor had an earlier pass's)."""

    def __init__(self, timeout: float, still: bool) -> None:
        since = "still running since an earlier pass" if still else f"no answer within {timeout:g} s"
        super().__init__(since)
        self.still = still


@dataclass
class _Outcome(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class BoundedReads:
    """Runs each GPU's reads (``run``) in its own thread, at most ``timeout`` seconds each."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._after_all: list[Callable[[], Any]] = []

    def run(self, gpu: int, read: Callable[[], T]) -> T:
        """``read()``'s value or exception; TimedOut when it takes longer than the timeout."""
        with self._lock:
            if gpu in self._running:
                raise TimedOut(self.timeout, still=True)
            self._running.add(gpu)
        outcome: _Outcome[T] = _Outcome()
        worker = threading.Thread(
            target=self._work, args=(gpu, read, outcome), name=f"gfd-gpu-{gpu}", daemon=True
        )
        worker.start()
        if not outcome.done.wait(self.timeout):
            raise TimedOut(self.timeout, still=False)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value  # type: ignore[return-value]  # set when no error was

    def busy(self) -> bool:
        with self._lock:
            return bool(self._running)

    def after_all(self, then: Callable[[], Any]) -> None:
        """Call ``then`` now when no read is running, else as soon as the last one has ended."""
        with self._lock:
            if self._running:
                self._after_all.append(then)
                return
        then()

    def _work(self, gpu: int, read: Callable[[], T], outcome: _Outcome[T]) -> None:
        try:
            outcome.value = read()
        except BaseException as err:  # handed to the waiting pass, which raises it there
            outcome.error = err
        finally:
            with self._lock:
                self._running.discard(gpu)
                due = [] if self._running else self._after_all
                if not self._running:
                    self._after_all = []
            outcome.done.set()
            for then in due:
                then()
