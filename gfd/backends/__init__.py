"""Choosing the backend. Backends are imported lazily, so a run loads only the one it uses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from gfd.backends.errors import BackendError, NoGpuFound
from gfd.choices import BackendChoice
from gfd.inventory import Inventory


class Backend(Protocol):
    name: str

    def probe(self) -> Inventory: ...


@runtime_checkable
class Watching(Protocol):
    """A backend that can also listen between passes (NVML's Xid events)."""

    def watch(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` whenever the hardware reports what the next pass should see."""

    def close(self) -> None:
        """Stop listening: the backend is no longer used."""


# Where a driver root keeps libnvidia-ml.so.1: the directories NVIDIA's device plugin searches, in its
# order; then where other distributions, the container toolkit and JetPack 6 put it.
LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib",
    "usr/local/nvidia/lib64",
    "usr/lib/aarch64-linux-gnu/nvidia",
)
NVML_LIBRARY = "libnvidia-ml.so.1"


def detect(
    name: BackendChoice,
    *,
    host_root: Path = Path("/"),
    mock_profile: Path | None = None,
    with_vgpu: bool = False,
    driver_root: Path | None = None,
) -> tuple[Backend, Inventory | None]:
    """The backend to probe with, and the inventory when choosing it already took a probe (``auto`` on a
    machine without a Jetson), so that the caller does not probe NVML a second time.

    ``auto``: on a Jetson the tegra files (Jetson's NVML reports incomplete facts
    and may be absent); else NVML. NVML that loads but sees no GPU is a node
    without GPUs (labelled as such, as NVIDIA's GFD does). NVML that fails is
    reported as ``probe`` words it.
    """
    if name == "mock":
        from gfd.backends.mock import MockBackend

        if mock_profile is None:
            raise BackendError("profile", "the mock backend needs a profile file (--mock-profile)")
        return MockBackend(mock_profile), None
    if name == "tegra":
        return _tegra(host_root), None
    if name == "nvml":
        return _nvml(with_vgpu, host_root, driver_root), None

    from gfd.backends.tegra import is_jetson

    if is_jetson(host_root):
        return _tegra(host_root), None
    nvml = _nvml(with_vgpu, host_root, driver_root)
    return nvml, probe(nvml, host_root)


def probe(backend: Backend, host_root: Path) -> Inventory:
    """``backend.probe()``. A failing NVML is reported as it is (its message names the broken layer),
    unless the PCI bus shows no NVIDIA GPU at all: then that is what the user needs to hear."""
    try:
        return backend.probe()
    except BackendError as err:
        if backend.name != "nvml":
            raise
        raise _no_gpu_on_the_bus(host_root) or err from None


def _no_gpu_on_the_bus(host_root: Path) -> NoGpuFound | None:
    """When the PCI bus can be read and shows no NVIDIA GPU (and this is no Jetson), that; else None."""
    from gfd.backends.host import NO_GPU_FIX, NO_GPU_ON_THE_BUS, PCI_DIR, scan_pci
    from gfd.backends.tegra import is_jetson

    if not (host_root / PCI_DIR).is_dir():
        return None  # cannot tell (no sysfs here): NVML's reason stands
    gpus, _ = scan_pci(host_root)
    if gpus or is_jetson(host_root):
        return None
    return NoGpuFound(f"{NO_GPU_ON_THE_BUS}: {NO_GPU_FIX}")


def nvml_library(driver_root: Path | None) -> str | None:
    """``libnvidia-ml.so.1`` below the driver root, resolved through its links; None: the loader's search."""
    if driver_root is None or driver_root == Path("/"):
        return None
    for directory in LIBRARY_DIRS:
        candidate = driver_root / directory / NVML_LIBRARY
        if candidate.exists():
            return str(candidate.resolve())
    return None


def _nvml(with_vgpu: bool, host_root: Path, driver_root: Path | None) -> Backend:
    from gfd.backends.nvml import NvmlBackend

    return NvmlBackend(with_vgpu=with_vgpu, host_root=host_root, library=nvml_library(driver_root))


def _tegra(host_root: Path) -> Backend:
    from gfd.backends.tegra import TegraBackend

    return TegraBackend(host_root)
