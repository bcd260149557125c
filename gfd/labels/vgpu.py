"""``nvidia.com/vgpu.*``: whether the node's GPUs are vGPU guests, and (opt-in) the host's driver.

``vgpu.present`` comes from NVML's virtualization mode, which needs no privilege, so it is written on
every node whose driver reports the mode, as NVIDIA's GFD writes it on every node. The host driver's
version and branch need the PCI config space (``--with-vgpu``, a privileged container).
"""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import LabelOptions, Labels, flag


def vgpu_labels(inv: Inventory, opts: LabelOptions) -> Labels:
    """With ``opts.with_vgpu``, also the host's driver labels (from the PCI config space)."""
    devices = sorted(inv.devices, key=lambda d: d.index)
    infos = [d.vgpu for d in devices if d.vgpu is not None] if opts.with_vgpu else []
    if infos:
        labels: Labels = {"nvidia.com/vgpu.present": "true"}
        # NVIDIA writes each device's values over the previous; all share one host, the last one wins.
        info = infos[-1]
        if info.host_driver_version is not None:
            labels["nvidia.com/vgpu.host-driver-version"] = info.host_driver_version
        if info.host_driver_branch is not None:
            labels["nvidia.com/vgpu.host-driver-branch"] = info.host_driver_branch
        return labels
    guests = [d.vgpu_guest for d in inv.devices]
    if not guests or None in guests:
        return {}  # the mode is unknown for some GPU: saying "false" could be wrong
    return {"nvidia.com/vgpu.present": flag(any(guests))}
