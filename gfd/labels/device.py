"""Full-GPU labels: ``nvidia.com/gpu.{product,count,memory,family,compute.*,mode}`` (hardware facts) and
``nvidia.com/gpu.{replicas,sharing-strategy}`` with the ``-SHARED`` product (what the device plugin hands
out, a family of its own so that the DRA label set can leave it out).

A node whose GPUs are all one model gets exactly NVIDIA's labels. On a node
with several models NVIDIA writes each model's labels over the others in
random order, so the values flip between runs; here the *primary model*
speaks for the node: the model with the most GPUs, ties broken by the
alphabetically first name. ``extras.py`` adds a count per model.
"""

from __future__ import annotations

from collections.abc import Sequence

from gfd.backends.decoding import PCI_CLASS_3D_CONTROLLER, PCI_CLASS_VGA_CONTROLLER
from gfd.inventory import Device, Inventory
from gfd.labels import resource, sanitize
from gfd.labels.common import LabelOptions, Labels, mig_on
from gfd.sharing_config import FULL_GPU_RESOURCE


def family(major: int, minor: int) -> str:
    """Architecture family from the compute capability, as NVIDIA names it (plus 11.x)."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 13: "rubin"}
    if major in names:
        return names[major]
    # NVIDIA's table (v0.20.0) has 10, 12 (Blackwell) and 13 (Rubin); 11.0 is Thor's number from CUDA 13
    # on, also Blackwell, where NVIDIA says "undefined", which would hide Thor from selectors.
    if major in (10, 11, 12):
        return "blackwell"
    return "undefined"


def by_model(devices: Sequence[Device]) -> dict[str, list[Device]]:
    groups: dict[str, list[Device]] = {}
    for device in sorted(devices, key=lambda d: d.index):
        groups.setdefault(device.name, []).append(device)
    return groups


def primary_model(devices: Sequence[Device]) -> str:
    """The model with the most GPUs; ties go to the alphabetically first name."""
    groups = by_model(devices)
    return min(groups, key=lambda name: (-len(groups[name]), name))


def _primary_group(devices: Sequence[Device]) -> tuple[str, list[Device], list[Device]]:
    """The primary model, its GPUs, and those of them that run whole (MIG off)."""
    model = primary_model(devices)
    group = by_model(devices)[model]
    return model, group, [d for d in group if not mig_on(d)]


def gpu_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    """The primary model's product, count, memory and architecture: facts of the hardware alone."""
    if not inv.devices:
        return {}
    model, group, full = _primary_group(inv.devices)
    # NVIDIA: a model's GPUs with MIG on are labelled by the first of them unless at least one GPU of
    # that model runs whole, which then speaks for all.
    representative = full[0] if full else group[0]
    key = resource.keys(FULL_GPU_RESOURCE)
    labels = {key.product: sanitize.product(model), key.count: str(len(group))}
    if representative.memory_mib:
        labels[f"{FULL_GPU_RESOURCE}.memory"] = str(representative.memory_mib)
    cc = representative.compute_capability
    if cc is not None and cc[0] != 0:
        labels[f"{FULL_GPU_RESOURCE}.family"] = family(*cc)
        labels[f"{FULL_GPU_RESOURCE}.compute.major"] = str(cc[0])
        labels[f"{FULL_GPU_RESOURCE}.compute.minor"] = str(cc[1])
    return labels


def sharing_labels(inv: Inventory, opts: LabelOptions) -> Labels:
    """How NVIDIA's device plugin shares the full GPUs: replicas, strategy, and ``-SHARED`` on the product.

    NVIDIA: a model whose GPUs all have MIG on is labelled without sharing (replicas 0).
    """
    if not inv.devices:
        return {}
    model, group, full = _primary_group(inv.devices)
    sharing = opts.sharing_or_default if full else None
    return resource.base(FULL_GPU_RESOURCE, len(group), model, None, sharing)


def _mode(pci_class: int | None) -> str:
    # The whole 24-bit class, programming interface included, as NVIDIA's getModeForClasses compares it:
    # a VGA controller with a non-zero interface byte is "unknown" there, and so here.
    modes = {PCI_CLASS_VGA_CONTROLLER: "graphics", PCI_CLASS_3D_CONTROLLER: "compute"}
    return modes.get(pci_class, "unknown") if pci_class is not None else "unknown"


def mode_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    """``nvidia.com/gpu.mode``: compute (class 0x030200), graphics (0x030000), or unknown.

    GPUs of different classes give ``unknown``, as from NVIDIA's GFD.
    """
    if not inv.devices:
        return {}
    modes = {_mode(d.pci_class) for d in inv.devices}
    return {"nvidia.com/gpu.mode": modes.pop() if len(modes) == 1 else "unknown"}
