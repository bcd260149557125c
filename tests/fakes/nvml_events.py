"""The event-set symbols of the fake NVML library: critical Xid events, injected by a test.

``FakeNvml.xid(index, xid)`` reports an Xid on a GPU, as the driver does when it logs one; every event set
that registered that GPU for critical Xid errors then returns it once from ``nvmlEventSetWait``.
"""

from __future__ import annotations

import ctypes
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.nvml_model import FakeGpu, HandleTable
from tests.fakes.nvml_wire import (
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    ERROR_TIMEOUT,
    SUCCESS,
    as_int,
    put,
    put_handle,
    target_of,
)

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
SUPPORTED_EVENTS = XID_CRITICAL_ERROR | 0x1 | 0x2  # and single/double-bit ECC, as a data-centre GPU has
NO_INSTANCE = 0xFFFFFFFF


@dataclass
class EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event mask
    pending: deque[tuple[FakeGpu, int]] = field(default_factory=deque)


class EventSymbols(HandleTable):
    """``c_<symbol>`` implementations for event sets; mixed into FakeNvml."""

    gpus: list[FakeGpu]
    _event_sets: dict[int, EventSet]
    _events: threading.Condition

    def xid(self, index: int, xid: int) -> None:
        """The driver reports Xid ``xid`` on GPU ``index``."""
        with self._events:
            for events in self._event_sets.values():
                if events.registered.get(index, 0) & XID_CRITICAL_ERROR:
                    events.pending.append((self.gpus[index], xid))
            self._events.notify_all()

    def _event_set(self, handle: Any) -> EventSet | None:
        try:
            value = ctypes.cast(handle, ctypes.c_void_p).value
        except (ctypes.ArgumentError, TypeError):
            return None
        return self._event_sets.get(value or 0)

    def c_nvmlEventSetCreate(self, out: Any) -> int:
        with self._events:
            value = 0x900000 + 0x10 * len(self._event_sets)
            self._event_sets[value] = EventSet()
        return put_handle(out, value)

    def c_nvmlEventSetFree(self, handle: Any) -> int:
        with self._events:
            value = ctypes.cast(handle, ctypes.c_void_p).value or 0
            return SUCCESS if self._event_sets.pop(value, None) is not None else ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetSupportedEventTypes(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return put(out, value=SUPPORTED_EVENTS) if isinstance(dev, FakeGpu) else ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceRegisterEvents(self, handle: Any, types: Any, handle_set: Any) -> int:
        dev = self._device(handle)
        mask = as_int(types)
        if not isinstance(dev, FakeGpu):
            return ERROR_INVALID_ARGUMENT
        if mask & ~SUPPORTED_EVENTS:
            return ERROR_NOT_SUPPORTED
        with self._events:
            events = self._event_set(handle_set)
            if events is None:
                return ERROR_INVALID_ARGUMENT
            events.registered[dev.index] = events.registered.get(dev.index, 0) | mask
        return SUCCESS

    def c_nvmlEventSetWait_v2(self, handle_set: Any, data: Any, timeout_ms: Any) -> int:
        info = target_of(data)
        if info is None:
            return ERROR_INVALID_ARGUMENT
        with self._events:
            events = self._event_set(handle_set)
            if events is None:
                return ERROR_INVALID_ARGUMENT
            if not events.pending:
                self._events.wait(as_int(timeout_ms) / 1000)
            if not events.pending:
                return ERROR_TIMEOUT
            gpu, xid = events.pending.popleft()
        ctypes.c_void_p.from_buffer(info, type(info).device.offset).value = gpu.handle
        info.eventType = XID_CRITICAL_ERROR
        info.eventData = xid
        info.gpuInstanceId = info.computeInstanceId = NO_INSTANCE
        return SUCCESS
