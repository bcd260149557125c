"""Driver and CUDA version labels, both NVIDIA's deprecated and current names.

``cuda.runtime*`` is, as in NVIDIA GFD, the newest CUDA version the *driver*
supports (NVML's cudaDriverVersion), not a toolkit installed on the node.
"""

from __future__ import annotations

from gfd.inventory import Inventory, cuda_version_parts
from gfd.labels.common import LabelOptions, Labels, LabelSet


def driver_labels(driver_version: str | None) -> LabelSet:
    if driver_version is None:
        return LabelSet()
    parts = driver_version.split(".")
    if not 2 <= len(parts) <= 3:
        warning = f"driver version {driver_version!r} is not MAJOR.MINOR[.REV]; no driver version labels"
        return LabelSet(warnings=(warning,))
    major, minor = parts[0], parts[1]
    rev = parts[2] if len(parts) == 3 else ""  # NVIDIA writes an empty revision, e.g. for "470.57"
    labels = {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": driver_version,
    }
    return LabelSet(labels)


def cuda_labels(cuda_driver_version: int | None) -> Labels:
    if cuda_driver_version is None:
        return {}
    major, minor = cuda_version_parts(cuda_driver_version)
    return {
        "nvidia.com/cuda.runtime.major": str(major),
        "nvidia.com/cuda.runtime.minor": str(minor),
        "nvidia.com/cuda.runtime-version.major": str(major),
        "nvidia.com/cuda.runtime-version.minor": str(minor),
        "nvidia.com/cuda.runtime-version.full": f"{major}.{minor}",
    }


def version_labels(inv: Inventory, _opts: LabelOptions) -> LabelSet:
    if not inv.devices:
        return LabelSet()  # as NVIDIA: a node without GPUs gets no device labels
    return driver_labels(inv.driver_version) | cuda_labels(inv.cuda_driver_version)
