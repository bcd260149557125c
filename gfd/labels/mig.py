"""MIG labels: ``mig.capable``, ``mig.strategy`` and the single / mixed resource labels.

single: every GPU must have MIG on with one and the same profile everywhere;
the MIG devices then *are* ``nvidia.com/gpu`` (product ``<model>-MIG-<profile>``,
count = MIG devices, memory = MIG memory, plus attributes). Anything else
(a GPU with MIG on but no MIG devices, a GPU with MIG off next to MIG GPUs,
two profiles) is NVIDIA's invalid case: product ``<model>-MIG-INVALID``,
count, replicas and memory 0.

mixed: each profile becomes its own resource ``nvidia.com/mig-<profile>``;
the full-GPU labels stay as they are.
"""

from __future__ import annotations

from gfd.inventory import Device, Inventory, MigDevice
from gfd.labels import resource, sanitize
from gfd.labels.common import LabelOptions, Labels, LabelSet, flag, mig_on, mig_profile_label
from gfd.sharing_config import FULL_GPU_RESOURCE, SharingConfig

STRATEGY = "nvidia.com/mig.strategy"


def capable_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    if not inv.devices:
        return {}
    return {"nvidia.com/mig.capable": flag(any(d.mig_capable for d in inv.devices))}


def strategy_labels(inv: Inventory, opts: LabelOptions) -> LabelSet:
    """``mig.strategy`` and, for single and mixed, the MIG resource labels (single overrides ``gpu.*``)."""
    strategy = opts.mig_strategy
    if not inv.devices or strategy == "none":
        return LabelSet()
    labels = LabelSet({STRATEGY: strategy})
    if strategy == "single":
        return labels | _single_labels(inv, opts.sharing_or_default)
    return labels | _mixed_labels(inv, opts.sharing_or_default)


def _profiles(devices: list[Device]) -> dict[str, tuple[Device, MigDevice, int]]:
    """Profile -> (parent of its first MIG device, that MIG device, how many), in GPU index order."""
    found: dict[str, tuple[Device, MigDevice, int]] = {}
    for device in sorted(devices, key=lambda d: d.index):
        for mig in device.mig_devices:
            name = mig_profile_label(mig)
            parent, first, count = found.get(name, (device, mig, 0))
            found[name] = (parent, first, count + 1)
    return found


def _invalid(model: str, reason: str) -> LabelSet:
    labels = {
        f"{FULL_GPU_RESOURCE}.product": sanitize.product(model, "INVALID"),
        f"{FULL_GPU_RESOURCE}.count": "0",
        f"{FULL_GPU_RESOURCE}.replicas": "0",
        f"{FULL_GPU_RESOURCE}.memory": "0",
        f"{FULL_GPU_RESOURCE}.sharing-strategy": "",  # empty, as NVIDIA writes it here
    }
    warning = f"MIG strategy single does not fit this node ({reason}); labelling it {model}-MIG-INVALID"
    return LabelSet(labels, (warning,))


def _single_labels(inv: Inventory, sharing: SharingConfig) -> LabelSet:
    enabled = [d for d in sorted(inv.devices, key=lambda d: d.index) if mig_on(d)]
    if not enabled:
        return LabelSet()  # no GPU has MIG on: single behaves like none
    model = enabled[0].name
    if any(not d.mig_devices for d in enabled):
        return _invalid(model, "a GPU has MIG enabled but no MIG devices")
    if len(enabled) != len(inv.devices):
        return _invalid(model, "GPUs with MIG enabled and disabled")
    profiles = _profiles(enabled)
    if len(profiles) != 1:
        return _invalid(model, f"more than one MIG profile: {', '.join(sorted(profiles))}")
    name, (parent, mig, count) = next(iter(profiles.items()))
    labels = resource.base(FULL_GPU_RESOURCE, count, parent.name, name, sharing)
    labels.update(resource.mig_attributes(FULL_GPU_RESOURCE, mig))
    return LabelSet(labels)


def _mixed_labels(inv: Inventory, sharing: SharingConfig) -> Labels:
    # GPUs with MIG on but no MIG devices simply contribute nothing here, as in NVIDIA GFD.
    labels: Labels = {}
    for name, (parent, mig, count) in _profiles([d for d in inv.devices if mig_on(d)]).items():
        res = f"nvidia.com/mig-{name}"
        labels.update(resource.base(res, count, parent.name, name, sharing))
        labels.update(resource.mig_attributes(res, mig))
    return labels
