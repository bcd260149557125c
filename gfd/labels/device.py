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
from gfd.labels.common import LabelOptions, Labels, LabelSet, mig_on
from gfd.sharing_config import FULL_GPU_RESOURCE

# NVML's nvmlDeviceArchitecture_t (nvml.h) -> the family name NVIDIA's GFD writes for that architecture.
# 11 and 12 are DLA engines and 15 an NPU, never a GPU's answer; 0xffffffff is "unknown".
NVML_ARCHITECTURES: dict[int, str] = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada-lovelace",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}

# From compute capability 10 on the major no longer names the family: Rubin is 10.7 (sm_107, CUDA 13.4),
# beside Blackwell's 10.0 (B200, GB200) and 10.3 (B300, GB300). So each (major, minor) is listed, and
# only a major whose every minor is one family (12: RTX 50, RTX PRO, GB10) stands for all its minors.
# Source: NVIDIA's CUDA GPU compute capability table, https://developer.nvidia.com/cuda-gpus, and the
# CUDA 13.4 release notes for 10.7. 11.0 is Jetson Thor from CUDA 13 on (Blackwell).
CAPABILITY_FAMILIES: dict[tuple[int, int], str] = {
    (10, 0): "blackwell",
    (10, 3): "blackwell",
    (10, 7): "rubin",
    (11, 0): "blackwell",
}
WHOLE_MAJOR_FAMILIES: dict[int, str] = {12: "blackwell"}
NEWEST_KNOWN_CAPABILITY = (12, 1)  # GB10; what the docs call the table's "known up to" (as of 2026-12)
UNKNOWN_FAMILY = "undefined"  # NVIDIA's value for a compute capability its table does not know


def family(major: int, minor: int) -> str | None:
    """Architecture family from the compute capability, as NVIDIA names it; None where the table does
    not know it (the label is then NVIDIA's ``undefined``)."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}
    if major in names:
        return names[major]
    return CAPABILITY_FAMILIES.get((major, minor)) or WHOLE_MAJOR_FAMILIES.get(major)


def device_family(device: Device) -> tuple[str, str | None]:
    """The family label of ``device`` and, where neither NVML nor the table knows it, the warning.

    NVML's own architecture answer wins (NVIDIA's DRA driver reads the same through go-nvlib); the
    compute-capability table stands in where the backend or the driver gives none (the mock and tegra
    backends, drivers before R460)."""
    if device.architecture is not None and (named := NVML_ARCHITECTURES.get(device.architecture)):
        return named, None
    cc = device.compute_capability
    assert cc is not None
    if (named := family(*cc)) is not None:
        return named, None
    if cc <= (9, 9):
        return UNKNOWN_FAMILY, None  # a capability no GPU has (4.x): NVIDIA's "undefined", nothing newer
    known = ".".join(map(str, NEWEST_KNOWN_CAPABILITY))
    return UNKNOWN_FAMILY, (
        f"GPU {device.index} ({device.name}): compute capability {cc[0]}.{cc[1]} is not in gfd's "
        f"architecture table (known up to {known} and Rubin's 10.7) and the driver did not name the "
        f"architecture, so nvidia.com/gpu.family is {UNKNOWN_FAMILY!r}; a newer gpu-labeller may know it"
    )


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


def gpu_labels(inv: Inventory, _opts: LabelOptions) -> LabelSet:
    """The primary model's product, count, memory and architecture: facts of the hardware alone."""
    if not inv.devices:
        return LabelSet()
    model, group, full = _primary_group(inv.devices)
    # NVIDIA: a model's GPUs with MIG on are labelled by the first of them unless at least one GPU of
    # that model runs whole, which then speaks for all.
    representative = full[0] if full else group[0]
    key = resource.keys(FULL_GPU_RESOURCE)
    labels = {key.product: sanitize.product(model), key.count: str(len(group))}
    if representative.memory_mib:
        labels[f"{FULL_GPU_RESOURCE}.memory"] = str(representative.memory_mib)
    cc = representative.compute_capability
    warnings: tuple[str, ...] = ()
    if cc is not None and cc[0] != 0:
        named, unknown = device_family(representative)
        labels[f"{FULL_GPU_RESOURCE}.family"] = named
        labels[f"{FULL_GPU_RESOURCE}.compute.major"] = str(cc[0])
        labels[f"{FULL_GPU_RESOURCE}.compute.minor"] = str(cc[1])
        warnings = (unknown,) if unknown else ()
    return LabelSet(labels, warnings)


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
