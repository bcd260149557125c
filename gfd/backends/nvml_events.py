"""NVML's critical Xid events, listened for between passes, as NVIDIA's device plugin listens for them.

A thread holds its own NVML session with one event set, registers every GPU for critical Xid errors and
waits on the set. A fatal Xid (``gpu_health.is_fatal_xid``) marks the GPU in ``XidMarks`` and wakes the
daemon, so the labels say "degraded" at once instead of at the next pass. Where the driver has no event
sets (or a GPU cannot register), there is nothing to listen to and the passes alone decide.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gfd.backends import decoding
from gfd.backends.gpu_health import XidMarks, is_fatal_xid

log = logging.getLogger("gfd")

WAIT_MS = 1000  # how long one wait blocks: the longest the thread takes to notice it should stop


class XidWatch:
    """``start()`` the listening thread, ``stop()`` it; ``refresh()`` asks it to register GPUs anew (a GPU
    that answers again, one added by a driver reload)."""

    def __init__(self, nvml: ModuleType, marks: XidMarks, wake: Callable[[], None]) -> None:
        self.nvml = nvml
        self.marks = marks
        self.wake = wake
        self._stop = threading.Event()
        self._refresh = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()  # set once the event set exists and GPUs were registered

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gfd-xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * WAIT_MS / 1000)

    def refresh(self) -> None:
        self._refresh.set()

    def _run(self) -> None:
        n = self.nvml
        try:
            n.nvmlInit()
        except n.NVMLError as err:
            log.debug("no Xid events: NVML does not start (%s)", err)
            return
        try:
            self._listen()
        finally:
            with contextlib.suppress(n.NVMLError):
                n.nvmlShutdown()

    def _listen(self) -> None:
        n = self.nvml
        try:
            events = n.nvmlEventSetCreate()
        except n.NVMLError as err:
            log.info("no Xid events from this driver (%s); GPU health comes from the passes alone", err)
            return
        try:
            registered: set[str] = set()
            self._register(events, registered)
            self.listening.set()
            while not self._stop.is_set():
                if self._refresh.is_set():
                    self._refresh.clear()
                    self._register(events, registered)
                self._wait(events)
        finally:
            with contextlib.suppress(n.NVMLError):
                n.nvmlEventSetFree(events)

    def _register(self, events: Any, registered: set[str]) -> None:
        """Register each GPU not registered yet for critical Xid errors, as far as it supports them."""
        n = self.nvml
        try:
            count = n.nvmlDeviceGetCount()
        except n.NVMLError:
            return
        for i in range(count):
            try:
                handle = n.nvmlDeviceGetHandleByIndex(i)
                bus_id = _bus_id(n, handle)
                if bus_id is None or bus_id in registered:
                    continue
                supported = n.nvmlDeviceGetSupportedEventTypes(handle)
                wanted = n.nvmlEventTypeXidCriticalError & supported
                if wanted:
                    n.nvmlDeviceRegisterEvents(handle, wanted, events)
                    registered.add(bus_id)
            except n.NVMLError as err:
                # A GPU that cannot register now (lost, too old) is tried again at the next refresh.
                log.debug("GPU %d: no Xid events (%s)", i, err)

    def _wait(self, events: Any) -> None:
        n = self.nvml
        try:
            data = n.nvmlEventSetWait_v2(events, WAIT_MS)
        except n.NVMLError_Timeout:
            return
        except n.NVMLError as err:
            log.debug("waiting for Xid events failed (%s)", err)
            self._stop.wait(WAIT_MS / 1000)  # do not spin on a set that keeps failing
            return
        if int(data.eventType) != n.nvmlEventTypeXidCriticalError:
            return
        xid = int(data.eventData)
        if not is_fatal_xid(xid):
            return
        try:
            bus_id = _bus_id(n, data.device)
        except n.NVMLError:
            bus_id = None
        if bus_id is None:
            log.warning("Xid %d on a GPU NVML cannot name; not marked", xid)
            return
        if self.marks.mark(bus_id, xid):
            self.wake()


def _bus_id(n: ModuleType, handle: Any) -> str | None:
    info = n.nvmlDeviceGetPciInfo(handle)
    raw = info.busId
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return decoding.sysfs_bus_id(text)
