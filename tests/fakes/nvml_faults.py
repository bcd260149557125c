"""Per-GPU faults of the fake NVML library: what one GPU answers instead of its facts.

A real GPU that falls off the bus answers NVML_ERROR_GPU_IS_LOST to every call on it; a driver in trouble
answers NVML_ERROR_UNKNOWN; a GPU may fail one query only (a damaged infoROM, a reset it waits for); and a
GPU stuck inside the driver makes the call block. ``FakeNvml.break_gpu(index, fault)`` sets one of these,
``heal(index)`` lifts it (and releases calls blocked on it), as a reset would.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tests.fakes.nvml_wire import ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED, ERROR_UNKNOWN, SUCCESS

HANG_BOUND_S = 120.0  # a blocked call returns by itself after this, so a broken test cannot hang for ever
# The deadline the tests give a GPU's reads (NvmlBackend's gpu_timeout): ample for a healthy GPU of the fake
# on a loaded machine, and what a hang costs a test, once (later passes see the read still running).
READ_DEADLINE_S = 3.0


@dataclass(frozen=True)
class GpuFault:
    """``code``: what the GPU's calls answer; ``only``: the symbols it applies to (empty: every call on the
    GPU, its handle look-up included); ``hang``: the calls block until the fault is lifted."""

    code: int = SUCCESS
    only: frozenset[str] = frozenset()
    hang: bool = False

    def applies_to(self, symbol: str) -> bool:
        return not self.only or symbol in self.only


LOST = GpuFault(ERROR_GPU_IS_LOST)
UNKNOWN = GpuFault(ERROR_UNKNOWN)
HANG = GpuFault(hang=True)


def failing(symbol: str, code: int = ERROR_RESET_REQUIRED) -> GpuFault:
    """One query of the GPU fails; the others answer."""
    return GpuFault(code, frozenset({symbol}))


@dataclass
class Faults:
    """The faults in force, by GPU index, and the gates blocked calls wait at."""

    by_gpu: dict[int, GpuFault] = field(default_factory=dict)
    gates: dict[int, threading.Event] = field(default_factory=dict)

    def set(self, index: int, fault: GpuFault) -> None:
        self.by_gpu[index] = fault
        self.gates[index] = threading.Event()

    def lift(self, index: int) -> None:
        self.by_gpu.pop(index, None)
        gate = self.gates.pop(index, None)
        if gate is not None:
            gate.set()

    def answer(self, index: int, symbol: str) -> int | None:
        """The code to answer instead of the call (None: make the call); blocks while the GPU hangs."""
        fault = self.by_gpu.get(index)
        if fault is None or not fault.applies_to(symbol):
            return None
        if fault.hang:
            self.gates[index].wait(HANG_BOUND_S)
            return None  # lifted: the call goes through, late
        return fault.code
