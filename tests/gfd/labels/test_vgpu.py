"""vGPU labels (gfd/labels/vgpu.py): only with --with-vgpu."""

from __future__ import annotations

from gfd.inventory import Device, Inventory, VGpuInfo
from tests.gfd.labels.build import labels


def test_vgpu_labels_only_when_asked_for() -> None:
    dev = Device(
        index=0,
        name="GRID A100-40C",
        vgpu=VGpuInfo(host_driver_version="550.54.16", host_driver_branch="r550_00"),
    )
    inv = Inventory(backend="nvml", devices=(dev,))
    assert not any(k.startswith("nvidia.com/vgpu.") for k in labels(inv))
    got = labels(inv, with_vgpu=True)
    assert got["nvidia.com/vgpu.present"] == "true"
    assert got["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert got["nvidia.com/vgpu.host-driver-branch"] == "r550_00"
