"""``nvidia.com/vgpu.*``: on a vGPU guest, the host's driver (opt-in: needs PCI config space)."""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import Labels


def vgpu_labels(inv: Inventory) -> Labels:
    infos = [d.vgpu for d in sorted(inv.devices, key=lambda d: d.index) if d.vgpu is not None]
    if not infos:
        return {}
    labels: Labels = {"nvidia.com/vgpu.present": "true"}
    # NVIDIA writes every device's values over the previous; all share one host, the last one wins there too.
    info = infos[-1]
    if info.host_driver_version is not None:
        labels["nvidia.com/vgpu.host-driver-version"] = info.host_driver_version
    if info.host_driver_branch is not None:
        labels["nvidia.com/vgpu.host-driver-branch"] = info.host_driver_branch
    return labels
