"""Which of a node's GPUs cannot be used, from what NVML answered, the Xid events it reported and the PCI bus.

Pure rules, no NVML and no file access: ``reconcile`` compares the GPUs NVML answered for and those that
failed with what the PCI bus shows; ``XidMarks`` keeps, between passes, the GPUs a fatal Xid marked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gfd.backends.host import PciGpu
from gfd.inventory import FailureLayer, GpuFailure, Health

# The Xids NVIDIA's device plugin ignores as application errors (internal/rm/health.go, the same list in
# v0.19.3 and v0.20.0): the GPU stays healthy, only the program that caused them failed. Every other Xid
# it receives as a critical-error event makes it withdraw the GPU, and makes gfd mark the GPU failing.
APPLICATION_XIDS = frozenset(
    {
        13,  # graphics engine exception
        31,  # GPU memory page fault
        43,  # GPU stopped processing (the program's context was reset)
        45,  # preemptive clean-up after earlier errors
        68,  # video processor exception
        109,  # context-switch timeout
    }
)
# Where a fatal Xid's problem lies, by NVIDIA's Xid catalog: an NVLink error is the fabric's, an error of the
# GPU System Processor (GSP) firmware the driver runs on is the driver's; the rest are the GPU's own.
_XID_LAYERS: dict[int, FailureLayer] = {74: "fabric", 119: "driver", 120: "driver"}

NOT_IN_NVML = "not reported by NVML"

# What to do about a failing GPU, by where its problem lies; said by the daemon's log and by gfd doctor.
FIXES: dict[FailureLayer, str] = {
    "hardware": "`sudo dmesg | grep -i xid` says what happened (Xid 79: fell off the bus); reset the GPU "
    "(`nvidia-smi -r -i <bus id>`) or reboot the node, and have the board checked if it recurs",
    "driver": "`sudo dmesg | grep -i nvrm` says why the driver failed it; reload the NVIDIA driver or reboot",
    "fabric": "check NVIDIA Fabric Manager (`systemctl status nvidia-fabricmanager`) and the NVSwitches; the "
    "GPU runs no CUDA work until it has joined its NVLink fabric",
}


def failure_line(failure: GpuFailure) -> str:
    """One log line: which GPU, which error, while doing what, the layer and what to do."""
    error = f"{failure.error} ({failure.detail})" if failure.detail else failure.error
    doing = f" reading {failure.doing}" if failure.doing else ""
    return (
        f"{failure.where} cannot be used: {error}{doing}; labelling the node degraded from the GPUs that "
        f"answer ({failure.layer}: {FIXES[failure.layer]})"
    )


def is_fatal_xid(xid: int) -> bool:
    return xid not in APPLICATION_XIDS


def xid_failure(xid: int, index: int | None, pci_bus_id: str | None) -> GpuFailure:
    return GpuFailure(pci_bus_id, index, f"Xid {xid}", _XID_LAYERS.get(xid, "hardware"))


def missing_from_nvml(gpu: PciGpu) -> GpuFailure:
    """A GPU the bus shows for the NVIDIA driver that NVML does not report. Bound to the driver, the GPU
    itself failed (fell off the bus, or failed to initialise); bound to none, the driver did not take it."""
    return GpuFailure(gpu.address, None, NOT_IN_NVML, "hardware" if gpu.driver else "driver")


def reconcile(
    answering: Sequence[str | None], failures: Sequence[GpuFailure], bus: Sequence[PciGpu] | None
) -> Health:
    """The node's health: ``failures`` of the GPUs NVML lists, and a failure for each GPU the PCI bus shows
    (for the NVIDIA driver) that is neither answering nor among them. ``answering``: the sysfs bus ids of
    the GPUs that answered; ``bus``: None where the bus cannot be read.

    A failure whose bus id NVML could not tell (its handle failed) takes the address of a bus GPU nobody
    claimed, when exactly as many are left over as such failures: then they are the same GPUs, in NVML's
    order, which is the bus's order. Where NVML does not say where an answering GPU sits, the bus cannot be
    matched against it and gives the count only.
    """
    if not bus:
        return Health(tuple(failures), None)
    mine = sorted((g for g in bus if g.for_nvidia_driver), key=lambda g: g.address)
    if not all(answering):
        return Health(tuple(failures), len(mine) or None)
    claimed = {b for b in answering if b} | {f.pci_bus_id for f in failures if f.pci_bus_id}
    left = [g for g in mine if g.address not in claimed]
    unnamed = [f for f in failures if f.pci_bus_id is None]
    named = list(failures)
    if unnamed and len(unnamed) == len(left):
        by_failure = dict(zip((id(f) for f in unnamed), left, strict=True))
        named = [_at(f, by_failure[id(f)]) if id(f) in by_failure else f for f in failures]
        left = []
    found = [*named, *(missing_from_nvml(g) for g in left)]
    found.sort(key=lambda f: (f.index is None, f.index or 0, f.pci_bus_id or ""))
    return Health(tuple(found), len(mine) or None)


def _at(failure: GpuFailure, gpu: PciGpu) -> GpuFailure:
    return GpuFailure(gpu.address, failure.index, failure.error, failure.layer, failure.doing)


@dataclass
class _Mark:
    xid: int
    stopped_answering: bool = False


class XidMarks:
    """The GPUs (by sysfs bus id) a fatal Xid marked, kept between passes. A mark holds while the GPU keeps
    answering; once a pass sees it not answer (a reset takes it away) and a later one sees it answer again,
    the mark is gone. Written by the event thread, read by the passes: every method takes the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, _Mark] = {}

    def mark(self, pci_bus_id: str, xid: int) -> bool:
        """Record a fatal Xid; True when it is news (the GPU was not marked already)."""
        with self._lock:
            if pci_bus_id in self._marks:
                return False
            self._marks[pci_bus_id] = _Mark(xid)
            return True

    def settle(self, answering: Iterable[tuple[int, str]], failing: Iterable[str]) -> list[GpuFailure]:
        """Take one pass's result: ``answering`` (index, bus id) GPUs and the bus ids of ``failing`` ones.
        Returns a failure for each answering GPU that is still marked."""
        with self._lock:
            for bus_id in failing:
                if bus_id in self._marks:
                    self._marks[bus_id].stopped_answering = True
            held = []
            for index, bus_id in answering:
                mark = self._marks.get(bus_id)
                if mark is None:
                    continue
                if mark.stopped_answering:
                    del self._marks[bus_id]  # it went away and came back: reset
                else:
                    held.append(xid_failure(mark.xid, index, bus_id))
            return held
