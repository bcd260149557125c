"""Reads of each GPU bounded by a deadline, so that a GPU hanging inside the driver cannot stall the pass.

A call into the driver cannot be interrupted, so a pass's reads run on a worker thread, one GPU after the
other, and the pass waits for each GPU's at most ``timeout`` seconds. The worker lives as long as no read
hangs, and the pass hands it all its GPUs at once and is woken once, when they are done: a thread, or a
hand-over, per GPU of every pass cost more CPU than the reads of a whole GPU. A read still running at its
deadline is left to finish on its own, with its worker: the GPUs after it go to a new one, and until the
stuck read has ended the same GPU is answered "timed out" at once, without a second thread stuck behind
the first. Whatever must wait for every read to end (closing NVML) is handed to ``after_all``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
Read = tuple[int, Callable[[], Any]]  # a GPU's index and what reads it


class TimedOut(Exception):
    """The GPU's reads did not end within the deadline (``still``: nor had an earlier pass's)."""

    def __init__(self, timeout: float, still: bool) -> None:
        since = "still running since an earlier pass" if still else f"no answer within {timeout:g} s"
        super().__init__(since)
        self.still = still


class _Batch:
    """Reads handed to a worker together; what each gave, and which one the worker is in now."""

    def __init__(self, reads: list[tuple[int, int, Callable[[], Any]]]) -> None:
        self.reads = reads  # (position in the pass, GPU, read)
        self.outcomes: dict[int, Any] = {}  # position -> value, or the exception raised
        self.done = threading.Condition()
        self.current: tuple[int, float] | None = None  # (position, when its read started)
        self.finished = False
        self.abandoned = False  # a read past its deadline: the worker stops after it

    def stuck(self, timeout: float) -> int | None:
        """Wait until every read has ended (None), or one has run past ``timeout`` (its position)."""
        with self.done:
            while not self.finished:
                if self.current is not None:
                    position, started = self.current
                    left = started + timeout - time.monotonic()
                    if left <= 0:
                        self.abandoned = True
                        return position
                else:
                    left = timeout
                self.done.wait(left)
        return None


class BoundedReads:
    """Runs a pass's GPU reads (``run_all``) on a worker thread, at most ``timeout`` seconds each."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._after_all: list[Callable[[], Any]] = []
        self._jobs: queue.SimpleQueue[_Batch] | None = None  # the live worker's; None: start one

    def run_all(self, reads: Sequence[Read]) -> list[Any]:
        """What each read returned, or the exception it raised (TimedOut past its deadline, or for a GPU whose
        read of an earlier pass is still running), in the order given."""
        outcomes: dict[int, Any] = {}
        pending: list[tuple[int, int, Callable[[], Any]]] = []
        for position, (gpu, read) in enumerate(reads):
            with self._lock:
                if gpu in self._running:
                    outcomes[position] = TimedOut(self.timeout, still=True)
                    continue
                self._running.add(gpu)
            pending.append((position, gpu, read))
        while pending:
            batch = _Batch(pending)
            self._worker().put(batch)
            stuck = batch.stuck(self.timeout)
            with batch.done:
                outcomes.update(batch.outcomes)
            if stuck is None:
                break
            self._jobs = None  # that worker is in the driver: the reads after the stuck one get a new one
            outcomes[stuck] = TimedOut(self.timeout, still=False)
            pending = [entry for entry in pending if entry[0] not in outcomes]
        return [outcomes[position] for position in range(len(reads))]

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

    def _worker(self) -> queue.SimpleQueue[_Batch]:
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(self._jobs,), name="gfd-gpu-reads", daemon=True).start()
        return self._jobs

    def _work(self, jobs: queue.SimpleQueue[_Batch]) -> None:
        while True:
            batch = jobs.get()
            self._do(batch)
            if jobs is not self._jobs:
                return  # given up on while it read: a new worker serves the reads now

    def _do(self, batch: _Batch) -> None:
        for position, gpu, read in batch.reads:
            with batch.done:
                if batch.abandoned:
                    return  # the pass moved the rest to a new worker
                batch.current = (position, time.monotonic())
            try:
                outcome: Any = read()
            except BaseException as err:  # handed to the waiting pass
                outcome = err
            with batch.done:
                batch.outcomes[position] = outcome
                batch.current = None  # between reads: no deadline runs
            self._ended(gpu)
        with batch.done:
            batch.finished = True
            batch.done.notify()

    def _ended(self, gpu: int) -> None:
        with self._lock:
            self._running.discard(gpu)
            due = [] if self._running else self._after_all
            if not self._running:
                self._after_all = []
        for then in due:
            then()
