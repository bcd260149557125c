"""Labels beyond NVIDIA GFD: present, simulated, a count per model, the CUDA version as one number."""

from __future__ import annotations

from gfd.inventory import Inventory, cuda_version_parts
from gfd.labels import sanitize
from gfd.labels.common import LabelOptions, Labels
from gfd.labels.device import by_model
from k8slabels import MAX_NAME

COUNT_KEY = "gpu.count."  # nvidia.com/gpu.count.<sanitised model>
PRESENT = "nvidia.com/gpu.present"
SIMULATED = "nvidia.com/gpu.simulated"


def present_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    return {PRESENT: "true"} if inv.devices else {}


def simulated_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    # Always on mock output, so a simulated node can never pass for a real one.
    return {SIMULATED: "true"} if inv.simulated else {}


def count_key(model: str) -> str | None:
    """``NVIDIA A100-SXM4-40GB`` -> ``nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB``; None if nothing left."""
    name = sanitize.fit(sanitize.sanitise(model), limit=MAX_NAME - len(COUNT_KEY))
    return f"nvidia.com/{COUNT_KEY}{name}" if name else None


def per_model_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    """One count per GPU model, so every model on a mixed node is visible (and selectable)."""
    labels: Labels = {}
    for model, devices in by_model(inv.devices).items():
        key = count_key(model)
        if key is not None:
            # Two raw names can sanitise alike ("A100 (x)" and "A100 x"): add them up.
            labels[key] = str(int(labels.get(key, "0")) + len(devices))
    return labels


def cuda_code_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    """``nvidia.com/cuda.runtime-version.code``: 1000*major + 10*minor (CUDA 12.4 -> 12040), for Gt/Lt."""
    if not inv.devices or inv.cuda_driver_version is None:
        return {}
    major, minor = cuda_version_parts(inv.cuda_driver_version)
    return {"nvidia.com/cuda.runtime-version.code": str(1000 * major + 10 * minor)}
