"""The labelling core: an Inventory in, a map of valid Kubernetes node labels out.

Each label family is a labeler, ``(inventory, options) -> labels``, in its own
small module; each decides itself whether it applies (a node without GPUs gets
no device labels, as from NVIDIA's GFD). A label set is a list of families:
``device-plugin`` is NVIDIA GFD's, ``dra`` the same less the families that
describe how NVIDIA's device plugin hands GPUs out (docs/labels.md says why
each is left out). ``collect_labels`` merges the chosen set's labelers in
NVIDIA GFD's order, later ones overriding earlier ones (as the MIG labels
override the full-GPU ones); ``build_labels`` then drops, with a warning, any
label Kubernetes would refuse. Warnings are returned with the labels
(``LabelSet``), never logged here: the daemon says each once while it repeats.
"""

from __future__ import annotations

from gfd.choices import LabelSetName
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

__all__ = [
    "LABELERS",
    "LABEL_SETS",
    "LabelOptions",
    "LabelSet",
    "Labeler",
    "Labels",
    "build_labels",
    "collect_labels",
]

# What describes NVIDIA's device plugin's allocation rather than the hardware: replicas, sharing strategy
# and -SHARED; mps.capable; mig.strategy with the single/mixed resources (mig-<profile>.*).
ALLOCATION: tuple[Labeler, ...] = (sharing.mps_labels, device.sharing_labels, mig.strategy_labels)

LABELERS: tuple[Labeler, ...] = (  # the device-plugin set: NVIDIA GFD's families, in its order
    machine.machine_labels,
    versions.version_labels,
    mig.capable_labels,
    sharing.mps_labels,
    device.gpu_labels,
    device.sharing_labels,
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

LABEL_SETS: dict[LabelSetName, tuple[Labeler, ...]] = {
    "device-plugin": LABELERS,
    "dra": tuple(labeler for labeler in LABELERS if labeler not in ALLOCATION),
}


def unused_options(opts: LabelOptions) -> tuple[str, ...]:
    """Warnings for options the chosen set has no family to apply: the DRA set with MIG or sharing."""
    if opts.label_set != "dra":
        return ()
    unused = []
    if opts.mig_strategy != "none":
        unused.append(
            f"label set dra: MIG strategy {opts.mig_strategy} is ignored (the DRA driver makes and hands out "
            "MIG devices; no mig.strategy or mig-<profile> labels)"
        )
    if opts.sharing is not None and (strategy := opts.sharing.strategy()) != "none":
        unused.append(
            f"label set dra: the config file's {strategy} sharing is ignored (the DRA driver shares GPUs; "
            "no replicas, sharing-strategy or -SHARED labels)"
        )
    return tuple(unused)


def collect_labels(inv: Inventory, opts: LabelOptions) -> LabelSet:
    """The chosen set's labelers' output merged, before the Kubernetes check."""
    collected = LabelSet(warnings=unused_options(opts))
    for labeler in LABEL_SETS[opts.label_set]:
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
