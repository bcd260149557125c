"""The inventory: one immutable snapshot of what a node has.

Backends (nvml, tegra, mock) fill it; labelers read it. It holds facts only,
already decoded from the wire shapes of NVML or the tegra files, so that every
labeler can be tested with a hand-built inventory and no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gfd.choices import BackendName

# Where a failing GPU's problem lies, for the one who fixes it: the GPU itself or its board ("hardware"),
# the kernel driver ("driver"), the NVLink fabric it must join before CUDA runs on it ("fabric").
FailureLayer = Literal["hardware", "driver", "fabric"]


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a GPU instance with its compute instance)."""

    profile: str  # NVML profile name without the "MIG " prefix, e.g. "1g.5gb" or "1g.10gb+me"
    memory_mib: int
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0


@dataclass(frozen=True)
class Device:
    """One full GPU as the driver sees it."""

    index: int
    name: str  # raw product name as NVML reports it, e.g. "NVIDIA A100-SXM4-40GB"
    uuid: str | None = None
    memory_mib: int | None = None  # None where the driver does not report it (Jetson NVML)
    compute_capability: tuple[int, int] | None = None
    # NVML's nvmlDeviceArchitecture_t (9 Hopper, 10 Blackwell, 13 Rubin); None where the backend or the
    # driver does not say. It names the family where the compute capability no longer does (Rubin is 10.7).
    architecture: int | None = None
    pci_class: int | None = None  # 24-bit PCI class code, e.g. 0x030200 (3D controller)
    pci_bus_id: str | None = None
    mig_capable: bool = False
    mig_enabled: bool = False  # current MIG mode; only meaningful when mig_capable
    mig_devices: tuple[MigDevice, ...] = ()
    clique: str | None = None  # "<clusterUUID>.<cliqueId>" from the GPU fabric, when reported
    vgpu: VGpuInfo | None = None  # set when the device is a vGPU guest device
    vgpu_guest: bool | None = None  # NVML's virtualization mode says vGPU guest; None: not reported
    minor: int | None = None  # the N of its /dev/nvidiaN; None where the driver does not say (Jetson)


@dataclass(frozen=True)
class VGpuInfo:
    """vGPU facts read from PCI config space (opt-in: reading it needs privilege)."""

    host_driver_version: str | None = None
    host_driver_branch: str | None = None


@dataclass(frozen=True)
class JetsonFacts:
    """What the tegra files say about a Jetson board. Every field may be unknown."""

    model: str | None = None  # "NVIDIA Jetson Orin Nano Developer Kit"
    soc: str | None = None  # "tegra234"
    l4t_version: str | None = None  # "36.4.0"
    jetpack_version: str | None = None  # "6.1", from the L4T table; None when unknown
    power_mode: str | None = None  # "15W"


@dataclass(frozen=True)
class GpuFailure:
    """A GPU on the node that cannot be used: NVML could not open or query it, it reported a fatal Xid, it
    could not join its fabric, or it is on the PCI bus and NVML does not report it."""

    pci_bus_id: str | None  # as sysfs names it, "0000:3b:00.0"; None when nothing told it
    index: int | None  # NVML's index; None for a GPU that NVML does not report
    error: str  # NVML's error name ("NVML_ERROR_GPU_IS_LOST"), "Xid 79", "not reported by NVML", ...
    layer: FailureLayer
    doing: str | None = None  # what was being read when it failed ("device name")
    detail: str | None = None  # the error in words, where its name is a code ("GPU is lost")

    @property
    def where(self) -> str:
        """``GPU 3 (0000:13:00.0)``, or whichever of the two is known."""
        if self.index is None:
            return f"GPU {self.pci_bus_id or '(unknown address)'}"
        return f"GPU {self.index}" + (f" ({self.pci_bus_id})" if self.pci_bus_id else "")


@dataclass(frozen=True)
class Health:
    """Whether every GPU the node has answers, as far as the backend can tell (NVML and the PCI bus)."""

    failures: tuple[GpuFailure, ...] = ()
    on_bus: int | None = None  # NVIDIA GPUs the PCI bus shows for its driver; None: none shown or unreadable


@dataclass(frozen=True)
class Inventory:
    """Everything the labelers may know about one node at one moment."""

    backend: BackendName
    driver_version: str | None = None  # "550.54.15"
    cuda_driver_version: int | None = None  # as NVML reports it: 12040 means CUDA 12.4
    devices: tuple[Device, ...] = ()
    machine: str | None = None  # contents of the machine-type file (DMI product name)
    jetson: JetsonFacts | None = None
    health: Health | None = None  # None: this backend cannot tell (tegra files, machine profiles)
    warnings: tuple[str, ...] = field(default=())

    @property
    def simulated(self) -> bool:
        return self.backend == "mock"


def cuda_version_parts(code: int) -> tuple[int, int]:
    """Split NVML's CUDA version integer: 12040 -> (12, 4)."""
    return code // 1000, (code % 1000) // 10
