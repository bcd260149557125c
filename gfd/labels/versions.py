"""Driver and CUDA version labels, both NVIDIA's deprecated and current names.

``cuda.runtime*`` is, as in NVIDIA GFD, the newest CUDA version the *driver*
supports (NVML's cudaDriverVersion), not a toolkit installed on the node.
"""

from __future__ import annotations

import logging

from gfd.inventory import Inventory, cuda_version_parts
from gfd.labels.common import LabelOptions, Labels

log = logging.getLogger("gfd.labels")


def driver_labels(driver_version: str | None) -> Labels:
    if driver_version is None:
        return {}
    parts = driver_version.split(".")
    if not 2 <= len(parts) <= 3:
        log.warning("driver version %r is not MAJOR.MINOR[.REV]; no driver version labels", driver_version)
        return {}
    major, minor = parts[0], parts[1]
    rev = parts[2] if len(parts) == 3 else ""  # NVIDIA writes an empty revision, e.g. for "470.57"
    return {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": driver_version,
    }


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


def version_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    if not inv.devices:
        return {}  # as NVIDIA: a node without GPUs gets no device labels
    return driver_labels(inv.driver_version) | cuda_labels(inv.cuda_driver_version)
