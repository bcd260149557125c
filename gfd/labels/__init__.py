"""The labelling core: an Inventory in, a map of valid Kubernetes node labels out.

Each label family is a labeler, ``(inventory, options) -> labels``, in its own
small module; each decides itself whether it applies (a node without GPUs gets
no device labels, as from NVIDIA's GFD). ``collect_labels`` merges them in
NVIDIA GFD's order, later ones overriding earlier ones (as the MIG labels
override the full-GPU ones); ``build_labels`` then drops, with a warning, any
label Kubernetes would refuse. Warnings are returned with the labels
(``LabelSet``), never logged here: the daemon says each once while it repeats.
"""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels import (
    clique,
    device,
    extras,
    health,
    jetson,
    machine,
    mig,
    sharing,
    timestamp,
    versions,
    vgpu,
)
from gfd.labels.common import Labeler, LabelOptions, Labels, LabelSet
from k8slabels import key_problem, value_problem

__all__ = ["LABELERS", "LabelOptions", "LabelSet", "Labeler", "Labels", "build_labels", "collect_labels"]

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
    health.health_labels,
    jetson.jetson_labels,
    timestamp.timestamp_labels,
)


def collect_labels(inv: Inventory, opts: LabelOptions) -> LabelSet:
    """Every labeler's output merged, before the Kubernetes check."""
    collected = LabelSet()
    for labeler in LABELERS:
        collected |= labeler(inv, opts)
    return collected


def build_labels(inv: Inventory, opts: LabelOptions) -> LabelSet:
    """The node labels for ``inv``, every key and value valid by the Kubernetes rules, and the warnings:
    the labelers' and one for each label left out because Kubernetes would refuse it."""
    collected = collect_labels(inv, opts)
    valid: Labels = {}
    warnings = list(collected.warnings)
    for key, value in collected.labels.items():
        problem = key_problem(key) or value_problem(value)
        if problem is not None:
            warnings.append(f"dropping label {key}={value!r}: {problem}")
            continue
        valid[key] = value
    return LabelSet(valid, tuple(warnings))
