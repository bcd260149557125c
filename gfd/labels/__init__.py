"""The labelling core: an Inventory in, a map of valid Kubernetes node labels out.

Each label family is a labeler, ``(inventory, options) -> labels``, in its own
small module; each decides itself whether it applies (a node without GPUs gets
no device labels, as from NVIDIA's GFD). ``collect_labels`` merges them in
NVIDIA GFD's order, later ones overriding earlier ones (as the MIG labels
override the full-GPU ones); ``build_labels`` then drops, with a warning, any
label Kubernetes would refuse.
"""

from __future__ import annotations

import logging

from gfd.inventory import Inventory
from gfd.labels import clique, device, extras, jetson, machine, mig, sharing, timestamp, versions, vgpu
from gfd.labels.common import Labeler, LabelOptions, Labels
from k8slabels import key_problem, value_problem

__all__ = ["LABELERS", "LabelOptions", "Labeler", "Labels", "build_labels", "collect_labels"]

log = logging.getLogger("gfd.labels")

LABELERS: tuple[Labeler, ...] = (
    machine.machine_labels,
    versions.version_labels,
    mig.capable_labels,
    sharing.mps_labels,
    device.gpu_labels,
    mig.strategy_labels,
    device.mode_labels,
    vgpu.vgpu_labels,
    clique.clique_labels,
    extras.present_labels,
    extras.simulated_labels,
    extras.per_model_labels,
    extras.cuda_code_labels,
    jetson.jetson_labels,
    timestamp.timestamp_labels,
)


def collect_labels(inv: Inventory, opts: LabelOptions) -> Labels:
    """Every labeler's output merged, before the Kubernetes check."""
    labels: Labels = {}
    for labeler in LABELERS:
        labels |= labeler(inv, opts)
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
