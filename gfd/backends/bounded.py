"""Reads of one GPU bounded by a deadline, so that a GPU hanging inside the driver cannot stall the pass.

A call into the driver cannot be interrupted, so the reads run on a worker thread and the pass waits for
each GPU's at most ``timeout`` seconds. The worker lives as long as no read hangs: starting a thread for
every GPU of every pass cost more CPU than the reads of a whole GPU. A read still running at its deadline
is left to finish on its own, with its worker: the next read gets a new one, and until the stuck read has
ended the same GPU is answered "timed out" at once, without a second thread stuck behind the first.
Whatever must wait for every read to end (closing NVML) is handed to ``after_all``.
"""

from __future__ import annotations

import queue
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
class _Job(Generic[T]):
    gpu: int
    read: Callable[[], T]
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class BoundedReads:
    """Runs each GPU's reads (``run``) on a worker thread, at most ``timeout`` seconds each."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._after_all: list[Callable[[], Any]] = []
        self._jobs: queue.SimpleQueue[_Job[Any]] | None = None  # the live worker's; None: start one

    def run(self, gpu: int, read: Callable[[], T]) -> T:
        """``read()``'s value or exception; TimedOut when it takes longer than the timeout."""
        with self._lock:
            if gpu in self._running:
                raise TimedOut(self.timeout, still=True)
            self._running.add(gpu)
        job: _Job[T] = _Job(gpu, read)
        self._worker().put(job)
        if not job.done.wait(self.timeout):
            self._jobs = None  # that worker is stuck in the driver: the next read gets a new one
            raise TimedOut(self.timeout, still=False)
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]  # set when no error was

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

    def _worker(self) -> queue.SimpleQueue[_Job[Any]]:
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(self._jobs,), name="gfd-gpu-reads", daemon=True).start()
        return self._jobs

    def _work(self, jobs: queue.SimpleQueue[_Job[Any]]) -> None:
        while True:
            job = jobs.get()
            self._do(job)
            if jobs is not self._jobs:
                return  # given up on while it ran: a new worker serves the reads now

    def _do(self, job: _Job[Any]) -> None:
        try:
            job.value = job.read()
        except BaseException as err:  # handed to the waiting pass, which raises it there
            job.error = err
        finally:
            with self._lock:
                self._running.discard(job.gpu)
                due = [] if self._running else self._after_all
                if not self._running:
                    self._after_all = []
            job.done.set()
            for then in due:
                then()
