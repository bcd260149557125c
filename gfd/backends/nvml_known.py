"""What the NVML backend need not read again every pass: the facts of a GPU or MIG device that cannot change
while it exists, keyed by what does change when it is replaced.

A pass reads a GPU's handle, bus id and UUID, memory, MIG mode and fabric state every time, and of each MIG
device its GPU and compute instance ids, UUID and attributes; everything else (name, compute capability,
PCI class, virtualization mode, device minor; a MIG device's profile, which takes the most calls to tell)
comes from here while that key is unchanged. What invalidates an entry:

- a driver restart or upgrade: the driver version is part of every key;
- another GPU in the slot: its UUID (and, moved, its bus id);
- a MIG reconfiguration: new GPU and compute instances, whose MIG devices have new UUIDs on NVIDIA's
  drivers (R470 on), and whose ids and attributes differ when only the ids were reused (the fake NVML of
  the tests reuses UUIDs, so it proves this last line of defence);
- anything not seen in a pass is forgotten at its end, so a GPU that comes back is read anew.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gfd.inventory import MigDevice, VGpuInfo

# nvmlDeviceGetAttributes' fields: a MIG device's shape, which tells its profile apart from another's.
ATTRIBUTE_FIELDS = (
    "multiprocessorCount",
    "sharedCopyEngineCount",
    "sharedDecoderCount",
    "sharedEncoderCount",
    "sharedJpegCount",
    "sharedOfaCount",
    "gpuInstanceSliceCount",
    "computeInstanceSliceCount",
    "memorySizeMB",
)


def attribute_values(attrs: Any) -> tuple[int, ...]:
    return tuple(int(getattr(attrs, name)) for name in ATTRIBUTE_FIELDS)


@dataclass(frozen=True)
class GpuKey:
    driver: str | None
    bus_id: str | None
    uuid: str | None

    @property
    def usable(self) -> bool:
        """Only a GPU that says who it is can be told from another in its place."""
        return self.uuid is not None and self.bus_id is not None


@dataclass(frozen=True)
class MigKey:
    gpu: GpuKey
    uuid: str | None
    gpu_instance: int
    compute_instance: int
    attributes: tuple[int, ...]


@dataclass(frozen=True)
class StaticGpu:
    """A GPU's facts that cannot change under one driver while it has its bus id and UUID, and the warnings
    reading them gave."""

    name: str
    compute_capability: tuple[int, int] | None
    pci_class: int | None
    vgpu: VGpuInfo | None
    vgpu_guest: bool | None
    minor: int | None
    architecture: int | None = None  # NVML's answer; None: the driver gave none
    warnings: tuple[str, ...] = ()


@dataclass
class KnownFacts:
    """The entries seen in the pass under way and the ones kept from the passes before it."""

    _gpus: dict[GpuKey, StaticGpu] = field(default_factory=dict)
    _migs: dict[MigKey, MigDevice] = field(default_factory=dict)
    _seen_gpus: dict[GpuKey, StaticGpu] = field(default_factory=dict)
    _seen_migs: dict[MigKey, MigDevice] = field(default_factory=dict)

    def gpu(self, key: GpuKey) -> StaticGpu | None:
        found = self._gpus.get(key) if key.usable else None
        if found is not None:
            self._seen_gpus[key] = found
        return found

    def remember_gpu(self, key: GpuKey, facts: StaticGpu) -> StaticGpu:
        if key.usable:
            self._seen_gpus[key] = facts
        return facts

    def mig(self, key: MigKey) -> MigDevice | None:
        found = self._migs.get(key) if key.gpu.usable else None
        if found is not None:
            self._seen_migs[key] = found
        return found

    def remember_mig(self, key: MigKey, facts: MigDevice) -> MigDevice:
        if key.gpu.usable:
            self._seen_migs[key] = facts
        return facts

    def forget_unseen(self) -> None:
        """End of a pass: keep what it saw, and only that."""
        self._gpus, self._seen_gpus = self._seen_gpus, {}
        self._migs, self._seen_migs = self._seen_migs, {}
