"""Labels for nodes that do not exist yet: gfd's labels as the node templates of autoscalers.

Cluster autoscaler, Karpenter and Cluster API can scale a GPU pool up from zero nodes only when they are
told the labels its nodes will get: there is no node to read them from. ``gfd --output-format FORMAT``
prints the labels of one pass (a machine profile with ``--backend mock``, or this node) in the form each
takes (docs/autoscaling.md):

- ``cluster-autoscaler``: the Auto Scaling Group tags of its AWS provider, one ``KEY=VALUE`` a line,
  ``k8s.io/cluster-autoscaler/node-template/label/<label>`` and, for the GPUs the device plugin will
  advertise, ``k8s.io/cluster-autoscaler/node-template/resources/<resource>``;
- ``karpenter``: a merge patch of a ``karpenter.sh/v1`` NodePool, ``spec.template.metadata.labels``;
- ``capi``: a merge patch of a Cluster API MachineDeployment, the cluster autoscaler's
  ``capacity.cluster-autoscaler.kubernetes.io/{labels,gpu-type,gpu-count}`` annotations (``dra-driver``
  instead of ``gpu-type`` for the DRA label set).

A template holds only what every node of the pool shares when it joins: ``LEFT_OUT`` names the labels it
never carries, and why. Everything here is a pure function of the labels and the inventory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import get_args

from gfd.choices import OutputFormat
from gfd.inventory import Device, Inventory
from gfd.labels import extras, health, timestamp
from gfd.labels.common import LabelOptions, mig_on, mig_profile_label
from gfd.labels.sharing import replicas
from gfd.sharing_config import FULL_GPU_RESOURCE, SHARED_RENAME_SUFFIX, SharingConfig

TEMPLATE_FORMATS: tuple[OutputFormat, ...] = tuple(f for f in get_args(OutputFormat) if f != "feature-file")
CA_LABEL = "k8s.io/cluster-autoscaler/node-template/label/"
CA_RESOURCE = "k8s.io/cluster-autoscaler/node-template/resources/"
AWS_TAGS_MAX = 50  # tags an Auto Scaling group may carry, its own included (AWS's tag restrictions)
CAPI_PREFIX = "capacity.cluster-autoscaler.kubernetes.io/"
CAPI_LABELS = CAPI_PREFIX + "labels"
CAPI_GPU_TYPE = CAPI_PREFIX + "gpu-type"
CAPI_GPU_COUNT = CAPI_PREFIX + "gpu-count"
CAPI_DRA_DRIVER = CAPI_PREFIX + "dra-driver"
DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver, as its ResourceSlices name it
CLIQUE = "nvidia.com/gpu.clique"

# Labels a template never carries: each describes one node at one moment, not the pool. A label in a
# template that a new node does not get makes the autoscaler start nodes no pending pod can use.
LEFT_OUT: dict[str, str] = {
    timestamp.TIMESTAMP: "the time of a pass: it changes every pass",
    extras.SIMULATED: "marks mock output: the pool's nodes are real",
    health.HEALTH: "the state of a running node's GPUs, not of the pool (a NotIn [degraded] selector "
    "matches a template without it)",
    health.ANSWERING: "a running node's GPU count by state",
    health.FAILING: "a running node's GPU count by state",
    health.ON_BUS: "a running node's GPU count by state",
    CLIQUE: "the NVLink domain a node's tray is cabled into: nodes of one pool span several",
}


@dataclass(frozen=True)
class Template:
    """What the nodes of a pool will have: their labels, and the GPUs they will offer the scheduler."""

    labels: dict[str, str]  # sorted by key, LEFT_OUT taken out
    resources: dict[str, int]  # extended resources NVIDIA's device plugin will advertise, by name
    no_resources: str | None = None  # why ``resources`` is empty
    dra_gpus: int | None = None  # the DRA label set: GPUs NVIDIA's DRA driver will publish
    no_dra_gpus: str | None = None  # the DRA label set: why ``dra_gpus`` is not known


def template_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` less ``LEFT_OUT``, sorted by key (the feature file's order)."""
    return {key: labels[key] for key in sorted(labels) if key not in LEFT_OUT}


def _name(resource: str, sharing: SharingConfig) -> str:
    """The resource as the device plugin names it: ``<resource>.shared`` when renamed (renameByDefault)."""
    active = sharing.active()
    renamed = active is not None and active.is_renamed(resource) and replicas(sharing, resource) > 1
    return resource + SHARED_RENAME_SUFFIX if renamed else resource


def _times(resource: str, count: int, sharing: SharingConfig) -> dict[str, int]:
    return {_name(resource, sharing): count * replicas(sharing, resource)}


def gpu_resources(inv: Inventory, opts: LabelOptions) -> tuple[dict[str, int], str | None]:
    """The extended resources NVIDIA's device plugin advertises on this node, by its MIG strategy and
    sharing (each replicated resource times its replicas), and why there are none where that is so.

    none: every GPU is ``nvidia.com/gpu``, MIG mode or not. single: every MIG device is ``nvidia.com/gpu``
    (all GPUs in MIG mode with one profile, else the device plugin refuses the node). mixed: the GPUs
    with MIG off are ``nvidia.com/gpu``, each MIG profile ``nvidia.com/mig-<profile>``.
    """
    if not inv.devices:
        return {}, "no GPU"
    if opts.label_set == "dra":
        return {}, "the dra label set: a DRA driver publishes the GPUs in ResourceSlices, not as a resource"
    sharing = opts.sharing_or_default
    on = [d for d in inv.devices if mig_on(d)]
    if opts.mig_strategy == "none" or not on:
        return _times(FULL_GPU_RESOURCE, len(inv.devices), sharing), None
    if opts.mig_strategy == "single":
        profiles = {mig_profile_label(m) for d in on for m in d.mig_devices}
        if len(on) != len(inv.devices) or len(profiles) != 1 or any(not d.mig_devices for d in on):
            return {}, "MIG strategy single does not fit this node (see the MIG-INVALID product label)"
        return _times(FULL_GPU_RESOURCE, sum(len(d.mig_devices) for d in on), sharing), None
    return _mixed(inv.devices, on, sharing), None


def _mixed(devices: tuple[Device, ...], on: list[Device], sharing: SharingConfig) -> dict[str, int]:
    found: dict[str, int] = {}
    whole = len(devices) - len(on)
    if whole:
        found |= _times(FULL_GPU_RESOURCE, whole, sharing)
    counts: dict[str, int] = {}
    for device in on:
        for mig in device.mig_devices:
            resource = f"nvidia.com/mig-{mig_profile_label(mig)}"
            counts[resource] = counts.get(resource, 0) + 1
    for resource, count in sorted(counts.items()):
        found |= _times(resource, count, sharing)
    return found


def dra_gpus(inv: Inventory, opts: LabelOptions) -> tuple[int | None, str | None]:
    """For the DRA label set, the GPUs NVIDIA's DRA driver will publish: every GPU, where none is in MIG
    mode (MIG devices are published as the driver is configured, which gfd does not know)."""
    if opts.label_set != "dra" or not inv.devices:
        return None, None
    if any(mig_on(d) for d in inv.devices):
        return None, "a GPU is in MIG mode: how many devices the DRA driver publishes depends on its setup"
    return len(inv.devices), None


def build_template(labels: Mapping[str, str], inv: Inventory, opts: LabelOptions) -> Template:
    """The template of a pool whose nodes are like ``inv``, labelled ``labels`` with ``opts``."""
    resources, no_resources = gpu_resources(inv, opts)
    dra, no_dra = dra_gpus(inv, opts)
    return Template(template_labels(labels), resources, no_resources, dra, no_dra)


def _quoted(text: str) -> str:
    # A JSON string is a YAML double-quoted scalar: "8", "true" and "02" stay strings, as labels must.
    return json.dumps(text)


def cluster_autoscaler(t: Template) -> str:
    """The AWS provider's ASG tags, ``KEY=VALUE`` a line: labels, then resources."""
    lines = [f"{CA_LABEL}{key}={value}" for key, value in t.labels.items()]
    lines += [f"{CA_RESOURCE}{name}={count}" for name, count in t.resources.items()]
    return "".join(line + "\n" for line in lines)


def karpenter(t: Template) -> str:
    """A merge patch of a karpenter.sh/v1 NodePool: ``spec.template.metadata.labels``."""
    lines = [
        "# karpenter.sh/v1 NodePool: kubectl patch nodepool NAME --type merge --patch-file FILE",
        "spec:",
        "  template:",
        "    metadata:",
        "      labels:",
    ]
    lines += [f"        {key}: {_quoted(value)}" for key, value in t.labels.items()]
    return "\n".join(lines) + "\n"


def capi_annotations(t: Template) -> dict[str, str]:
    """The cluster autoscaler's clusterapi capacity annotations: the labels as ``k=v,k=v``; the GPUs as
    ``gpu-type`` (the device plugin's one resource) or ``dra-driver``, with ``gpu-count``."""
    annotations = {CAPI_LABELS: ",".join(f"{key}={value}" for key, value in t.labels.items())}
    if len(t.resources) == 1:
        ((name, count),) = t.resources.items()
        annotations[CAPI_GPU_TYPE] = name
        annotations[CAPI_GPU_COUNT] = str(count)
    elif t.dra_gpus is not None:
        annotations[CAPI_DRA_DRIVER] = DRA_DRIVER
        annotations[CAPI_GPU_COUNT] = str(t.dra_gpus)
    return annotations


def capi(t: Template) -> str:
    """A merge patch of a Cluster API MachineDeployment: ``metadata.annotations``."""
    lines = [
        "# cluster.x-k8s.io MachineDeployment: "
        "kubectl patch machinedeployment NAME --type merge --patch-file FILE",
        "metadata:",
        "  annotations:",
    ]
    lines += [f"    {key}: {_quoted(value)}" for key, value in sorted(capi_annotations(t).items())]
    return "\n".join(lines) + "\n"


def notes(fmt: OutputFormat, t: Template) -> tuple[str, ...]:
    """What the template in ``fmt`` could not hold for this node, one line each (said as warnings)."""
    if fmt == "cluster-autoscaler":
        said = [] if t.resources else [f"no resources/ tag: {t.no_resources}"]
        if (tags := len(t.labels) + len(t.resources)) > AWS_TAGS_MAX:
            said.append(
                f"{tags} tags: an Auto Scaling group carries at most {AWS_TAGS_MAX}, its others included; "
                "keep the labels your workloads select on"
            )
        return tuple(said)
    if fmt == "capi" and t.dra_gpus is None and len(t.resources) != 1:
        if t.no_dra_gpus is not None:
            why = t.no_dra_gpus
        elif t.resources:
            why = f"they name one resource, and this node advertises {', '.join(t.resources)}"
        else:
            why = str(t.no_resources)
        return (f"no gpu-type/gpu-count annotations: {why}",)
    return ()  # Karpenter learns GPU capacity from the instance type, not from the NodePool


def render(fmt: OutputFormat, t: Template) -> str:
    """The template in ``fmt``."""
    if fmt == "cluster-autoscaler":
        return cluster_autoscaler(t)
    if fmt == "karpenter":
        return karpenter(t)
    if fmt == "capi":
        return capi(t)
    raise ValueError(f"not a template format: {fmt}")
