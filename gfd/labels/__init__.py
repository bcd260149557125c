"""The labelling core: an Inventory in, a map of valid Kubernetes node labels out.

Each label family has its own small module with a pure function from the
inventory to a label map; ``build_labels`` merges them in NVIDIA GFD's order
(later families override earlier ones, as the MIG labels override the
full-GPU ones) and drops, with a warning, any label Kubernetes would refuse.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gfd.inventory import Inventory
from gfd.labels import clique, device, extras, jetson, machine, mig, timestamp, versions, vgpu
from gfd.labels import sharing as share
from gfd.labels.common import Labels, mig_on
from gfd.sharing import SharingConfig
from k8slabels import key_problem, value_problem

__all__ = ["LabelOptions", "Labels", "build_labels", "collect_labels"]

MigStrategy = Literal["none", "single", "mixed"]
log = logging.getLogger("gfd.labels")


@dataclass(frozen=True)
class LabelOptions:
    mig_strategy: MigStrategy = "none"
    sharing: SharingConfig | None = None  # None: no config file, nothing is shared
    timestamp: datetime | None = None  # set: label nvidia.com/gfd.timestamp
    with_vgpu: bool = False


def collect_labels(inv: Inventory, opts: LabelOptions) -> Labels:
    """Every labeler's output merged, before the Kubernetes check."""
    if not inv.devices:
        return _without_gpus(inv, opts)
    sharing = opts.sharing if opts.sharing is not None else SharingConfig()
    labels: Labels = {}
    labels |= machine.machine_labels(inv)
    labels |= versions.version_labels(inv)
    if inv.devices:
        labels |= mig.capable_labels(inv)
        if sharing.strategy() == "mps" and any(mig_on(d) for d in inv.devices):
            log.warning("MPS sharing is not supported on GPUs with MIG enabled; labelling mps.capable=false")
        labels |= share.mps_labels(inv, sharing)
    labels |= device.gpu_labels(inv, sharing)
    labels |= mig.strategy_labels(inv, opts.mig_strategy)
    if opts.mig_strategy == "single":
        labels |= mig.single_labels(inv, sharing)
    elif opts.mig_strategy == "mixed":
        labels |= mig.mixed_labels(inv, sharing)
    labels |= device.mode_labels(inv)
    labels |= vgpu.vgpu_labels(inv, host_driver=opts.with_vgpu)
    labels |= clique.clique_labels(inv)
    labels |= extras.present_labels(inv)
    labels |= extras.simulated_labels(inv)
    labels |= extras.per_model_labels(inv)
    labels |= extras.cuda_code_labels(inv)
    labels |= jetson.jetson_labels(inv)
    labels |= timestamp.timestamp_labels(opts.timestamp)
    return labels


def _without_gpus(inv: Inventory, opts: LabelOptions) -> Labels:
    """A node without GPUs gets no device labels (no machine, no versions), as from NVIDIA's GFD; only
    what does not depend on a GPU: vGPU detection and the timestamp when asked for, ours beside them."""
    labels: Labels = {}
    labels |= vgpu.vgpu_labels(inv, host_driver=opts.with_vgpu)
    labels |= extras.simulated_labels(inv)
    labels |= jetson.jetson_labels(inv)
    labels |= timestamp.timestamp_labels(opts.timestamp)
    return labels


def build_labels(inv: Inventory, opts: LabelOptions) -> dict[str, str]:
    """The node labels for ``inv``: every key and value valid by the Kubernetes rules."""
    valid: dict[str, str] = {}
    for key, value in collect_labels(inv, opts).items():
        problem = key_problem(key) or value_problem(value)
        if problem is not None:
            log.warning("dropping label %s=%r: %s", key, value, problem)
            continue
        valid[key] = value
    return valid
