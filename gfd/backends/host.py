"""Facts read from the host's files under a host root: the PCI bus, the kernel module, the machine type.

The daemon's backends and ``gfd doctor`` both read these, so their paths, readers and parsers live here
(the pure parsers in ``decoding``).
Every reader answers None for a file that is missing or unreadable; what that means is the caller's call.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from gfd.backends import decoding
from gfd.inventory import Inventory

PCI_DIR = "sys/bus/pci/devices"
NVIDIA_VENDOR = 0x10DE
NVIDIA_DRIVER = "nvidia"  # the kernel module's name, as a device's sysfs `driver` link ends
KERNEL_MODULE_VERSION = "proc/driver/nvidia/version"
KERNEL_MODULE_SYSFS_VERSION = "sys/module/nvidia/version"  # the same version, while the module is loaded

# Said by the daemon (when NVML fails) and by the doctor's hardware layer, in the same words.
NO_GPU_ON_THE_BUS = (
    f"no NVIDIA (vendor 0x{NVIDIA_VENDOR:04x}) GPU under /{PCI_DIR} and no Jetson release file"
)
NO_GPU_FIX = (
    "check that the GPU is seated and powered, or passed through to this VM (`lspci -nn | grep 10de`)"
)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_hex(path: Path) -> int | None:
    """A sysfs hex attribute (``vendor``, ``device``, ``class``) as an int."""
    text = read_text(path)
    return decoding.parse_hex(text) if text is not None else None


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA display-class function on the PCI bus."""

    address: str  # "0000:3b:00.0"
    device_id: int | None
    pci_class: int | None
    driver: str | None = (
        None  # the kernel driver bound to it ("nvidia", "vfio-pci"); None: none, or unreadable
    )
    virtual_function: bool = False  # an SR-IOV virtual function (a vGPU host's), which NVML does not list

    @property
    def for_nvidia_driver(self) -> bool:
        """Meant to be one of NVML's GPUs: a physical function bound to the NVIDIA driver or to none (one the
        driver failed to take). A GPU given to another driver (vfio-pci for a VM) is not this node's."""
        return not self.virtual_function and self.driver in (None, NVIDIA_DRIVER)

    @property
    def kind(self) -> str:
        """The class as lspci names it."""
        if self.pci_class is None:
            return "unknown class"
        names = {decoding.PCI_VGA_CONTROLLER: "VGA controller", decoding.PCI_3D_CONTROLLER: "3D controller"}
        return names.get(self.pci_class >> 8, "other")


def scan_pci(host_root: Path) -> tuple[list[PciGpu], list[int | None]]:
    """NVIDIA's display-class functions (GPUs), and the classes of its other ones (HDMI audio, NVSwitch)."""
    return PciBus(host_root).scan()


_PciIds = tuple[int | None, int | None, int | None]  # vendor, class, device


class PciBus:
    """``scan_pci`` for a daemon that scans every pass: a function's vendor, class and device IDs never
    change while its sysfs entry exists, so they are read once per entry (an entry removed and added again
    has a new inode, and is read again); the driver binding, which does change, is read on every scan. A
    server has a hundred or more PCI functions, and reading all their IDs cost more than NVML's reads."""

    def __init__(self, host_root: Path) -> None:
        self.base = host_root / PCI_DIR
        self._ids: dict[tuple[str, int], _PciIds] = {}

    def scan(self) -> tuple[list[PciGpu], list[int | None]]:
        gpus: list[PciGpu] = []
        others: list[int | None] = []
        seen: dict[tuple[str, int], _PciIds] = {}
        try:
            with os.scandir(self.base) as entries:
                found = sorted((entry.name, entry.inode()) for entry in entries)
        except OSError:
            found = []
        for key in found:
            ids = seen[key] = self._ids.get(key) or self._read_ids(self.base / key[0])
            vendor, pci_class, device_id = ids
            if vendor != NVIDIA_VENDOR:
                continue
            if pci_class is not None and pci_class >> 16 != decoding.PCI_BASE_DISPLAY:
                others.append(pci_class)
                continue
            dev = self.base / key[0]
            gpus.append(
                PciGpu(dev.name, device_id, pci_class, _link_name(dev / "driver"), (dev / "physfn").exists())
            )
        self._ids = seen
        return gpus, others

    @staticmethod
    def _read_ids(dev: Path) -> _PciIds:
        vendor = read_hex(dev / "vendor")
        if vendor != NVIDIA_VENDOR:
            return vendor, None, None
        return vendor, read_hex(dev / "class"), read_hex(dev / "device")


def _link_name(path: Path) -> str | None:
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return None


def kernel_module_version(host_root: Path) -> str | None:
    """The loaded NVIDIA kernel module's version: from /proc/driver/nvidia/version, else from sysfs."""
    text = read_text(host_root / KERNEL_MODULE_VERSION)
    version = decoding.nvrm_version(text) if text else None
    if version is None:
        version = (read_text(host_root / KERNEL_MODULE_SYSFS_VERSION) or "").strip() or None
    return version


def read_machine_type(path: Path) -> str | None:
    """The DMI product name, or None where the file is missing (VMs, Jetsons, containers without /sys)."""
    text = read_text(path)
    return text.strip() if text is not None else None


def with_machine_type(inv: Inventory, path: Path) -> Inventory:
    """The inventory with its machine type from ``path`` when the backend left it open (a Jetson sets it)."""
    if inv.machine is not None:
        return inv
    machine = read_machine_type(path)
    return dataclasses.replace(inv, machine=machine) if machine is not None else inv
