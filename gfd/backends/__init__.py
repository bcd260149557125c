"""Backend selection. Backends are imported lazily, so a run loads only the one it uses."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from gfd.backends.errors import BackendError, NoGpuFound
from gfd.inventory import Inventory

BackendChoice = Literal["auto", "nvml", "tegra", "mock"]


class Backend(Protocol):
    name: str

    def probe(self) -> Inventory: ...


def select_backend(
    name: BackendChoice,
    *,
    host_root: Path = Path("/"),
    mock_profile: Path | None = None,
    with_vgpu: bool = False,
) -> Backend:
    """The backend to probe with; ``auto`` detects (raising BackendError / NoGpuFound when nothing fits)."""
    backend, _ = detect(name, host_root=host_root, mock_profile=mock_profile, with_vgpu=with_vgpu)
    return backend


def detect(
    name: BackendChoice,
    *,
    host_root: Path = Path("/"),
    mock_profile: Path | None = None,
    with_vgpu: bool = False,
) -> tuple[Backend, Inventory | None]:
    """Like ``select_backend``, also returning the inventory when detection already had to probe.

    ``auto``: on a Jetson the tegra files (Jetson's NVML reports incomplete facts
    and may be absent); else NVML when it loads and sees at least one GPU; else
    NoGpuFound. An NVML that fails to load is reported as it is (its message names
    the broken layer), because "no GPU" would hide a driver or toolkit problem.
    """
    if name == "mock":
        from gfd.backends.mock import MockBackend

        if mock_profile is None:
            raise BackendError("profile", "the mock backend needs a profile file (--mock-profile)")
        return MockBackend(mock_profile), None
    if name == "tegra":
        return _tegra(host_root), None
    if name == "nvml":
        return _nvml(with_vgpu, host_root), None

    from gfd.backends.tegra import is_jetson

    if is_jetson(host_root):
        return _tegra(host_root), None
    nvml = _nvml(with_vgpu, host_root)
    inventory = nvml.probe()
    if not inventory.devices:
        raise NoGpuFound("no NVIDIA GPU found on this node: NVML loaded but reports no devices")
    return nvml, inventory


def _nvml(with_vgpu: bool, host_root: Path) -> Backend:
    from gfd.backends.nvml import NvmlBackend

    return NvmlBackend(with_vgpu=with_vgpu, host_root=host_root)


def _tegra(host_root: Path) -> Backend:
    from gfd.backends.tegra import TegraBackend

    return TegraBackend(host_root)
