"""The fleet view's pure core: Node objects (as the API serves them) in, groups and problems out.

A group is the nodes that agree on what a workload author selects by: product, family, driver, CUDA,
health. A problem is something an operator acts on; each names its node and what to look at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gfd.doctor.cuda_table import CudaTable, CudaVersion, parse_cuda, show_cuda, verdict

PRESENT = "nvidia.com/gpu.present"
COUNT = "nvidia.com/gpu.count"
PRODUCT = "nvidia.com/gpu.product"
FAMILY = "nvidia.com/gpu.family"
DRIVER = "nvidia.com/cuda.driver-version.full"
CUDA = "nvidia.com/cuda.runtime-version.full"
HEALTH = "nvidia.com/gpu.health"
FAILING = "nvidia.com/gpu.health.failing"
REPLICAS = "nvidia.com/gpu.replicas"
MIG_STRATEGY = "nvidia.com/mig.strategy"
NVIDIA_PCI = "feature.node.kubernetes.io/pci-10de.present"
OWNED = "gpu-labeller.io/owned-labels"  # the label writer's ownership record (nfd_lite/node/reconciler.py)
GPU_RESOURCE = "nvidia.com/gpu"

# The label families gfd writes; a key of them on a Node that the writer's record does not list was set by
# another writer (NVIDIA's GFD, a hand-made label). The GPU Operator's own labels (gpu.present, gpu.deploy.*,
# mig.config*) are left out: they are meant to be set by others.
GFD_FAMILIES = (
    "nvidia.com/gpu.",
    "nvidia.com/cuda.",
    "nvidia.com/mig.",
    "nvidia.com/mig-",
    "nvidia.com/mps.",
)
OTHERS_KEYS = (PRESENT, "nvidia.com/gpu.deploy.", "nvidia.com/mig.config", "nvidia.com/gpu-operator.")

# Problem kinds, as --json names them.
COUNT_MISMATCH = "gpu-count-mismatch"
UNLABELLED = "unlabelled-gpu-node"
OTHER_WRITER = "other-writer"
DEGRADED = "degraded"
CUDA_TOO_OLD = "cuda-too-old"


@dataclass(frozen=True)
class Problem:
    node: str
    kind: str
    detail: str


@dataclass(frozen=True)
class Group:
    product: str
    family: str
    driver: str
    cuda: str
    health: str
    nodes: int
    gpus: int


@dataclass(frozen=True)
class Fleet:
    nodes: int  # every Node listed
    gpu_nodes: int  # those with GPU labels
    gpus: int
    groups: list[Group]
    problems: list[Problem]
    cuda: str | None = None  # the --cuda asked about
    can_run: list[str] = field(default_factory=list)  # GPU nodes whose driver runs it (fully or by compat)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nodes": self.nodes,
            "gpuNodes": self.gpu_nodes,
            "gpus": self.gpus,
            "groups": [g.__dict__ for g in self.groups],
            "problems": [p.__dict__ for p in self.problems],
        }
        if self.cuda is not None:
            out["cuda"] = {"version": self.cuda, "canRun": self.can_run}
        return out


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _count_problem(labels: Mapping[str, str], capacity: Mapping[str, str], dra: int | None) -> str | None:
    """gpu.count against what the scheduler can hand out: the device plugin's capacity (times the
    time-slicing replicas), or the DRA driver's GPUs. Under the mixed MIG strategy full GPUs and MIG devices
    are separate resources, so capacity is not comparable and is not checked."""
    count = _int(labels.get(COUNT))
    if count is None:
        return None
    if dra is not None and dra != count:
        return f"gpu.count={count} but the DRA driver publishes {dra} GPU(s) in ResourceSlices"
    if labels.get(MIG_STRATEGY) == "mixed" or GPU_RESOURCE not in capacity:
        return None
    want = count * (_int(labels.get(REPLICAS)) or 1)
    have = _int(capacity.get(GPU_RESOURCE))
    if have is not None and have != want:
        replicas = f" x {labels[REPLICAS]} replicas" if (_int(labels.get(REPLICAS)) or 1) > 1 else ""
        return f"gpu.count={count}{replicas} but capacity {GPU_RESOURCE}={have} (device plugin)"
    return None


def _foreign_keys(labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[str]:
    recorded = {k for k in annotations.get(OWNED, "").split(",") if k}
    return sorted(
        k
        for k in labels
        if k.startswith(GFD_FAMILIES) and not k.startswith(OTHERS_KEYS) and k not in recorded
    )


def summarize(
    nodes: Iterable[Mapping[str, Any]],
    dra_gpus: Mapping[str, int] | None = None,
    cuda: str | None = None,
    table: CudaTable | None = None,
) -> Fleet:
    """The fleet from Node objects; ``dra_gpus`` maps a node name to the GPUs NVIDIA's DRA driver publishes
    for it (only nodes it publishes for); ``cuda`` (X.Y) asks which nodes can run an image built with it,
    judged by ``table`` (gfd doctor's CUDA table)."""
    wanted: CudaVersion | None = parse_cuda(cuda) if cuda is not None else None
    if wanted is not None and table is None:
        from gfd.doctor.cuda_table import load_table

        table = load_table()
    dra_gpus = dra_gpus or {}
    groups: dict[tuple[str, str, str, str, str], list[int]] = {}
    problems: list[Problem] = []
    can_run: list[str] = []
    listed = gpu_nodes = total = 0
    for node in nodes:
        listed += 1
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels: Mapping[str, str] = meta.get("labels") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        capacity: Mapping[str, str] = (node.get("status") or {}).get("capacity") or {}
        if PRESENT not in labels and COUNT not in labels:
            if labels.get(NVIDIA_PCI) == "true" or name in dra_gpus:
                problems.append(
                    Problem(name, UNLABELLED, "NVIDIA hardware (NFD's PCI label or DRA) but no GPU labels")
                )
            continue
        gpu_nodes += 1
        gpus = _int(labels.get(COUNT)) or 0
        total += gpus
        health = labels.get(HEALTH, "")
        key = (
            labels.get(PRODUCT, ""),
            labels.get(FAMILY, ""),
            labels.get(DRIVER, ""),
            labels.get(CUDA, ""),
            health,
        )
        tally = groups.setdefault(key, [0, 0])
        tally[0] += 1
        tally[1] += gpus
        if (why := _count_problem(labels, capacity, dra_gpus.get(name))) is not None:
            problems.append(Problem(name, COUNT_MISMATCH, why))
        if health == "degraded":
            failing = labels.get(FAILING)
            problems.append(
                Problem(name, DEGRADED, f"gpu.health=degraded (failing: {failing or 'see gfd doctor'})")
            )
        if foreign := _foreign_keys(labels, annotations):
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            problems.append(Problem(name, OTHER_WRITER, f"GPU labels not in the writer's record: {shown}"))
        if wanted is not None and table is not None:
            driver = labels.get(DRIVER)
            reported = labels.get(CUDA)
            if driver is None:
                continue
            try:
                judged = verdict(table, driver, wanted, parse_cuda(reported) if reported else None)
            except ValueError:
                continue
            if judged.kind in ("full", "minor-compat"):
                can_run.append(name)
            elif judged.kind == "too-old":
                need = judged.needed or judged.compat_min
                problems.append(
                    Problem(
                        name,
                        CUDA_TOO_OLD,
                        f"driver {driver} cannot run CUDA {show_cuda(wanted)} (needs >= {need})",
                    )
                )
    return Fleet(
        nodes=listed,
        gpu_nodes=gpu_nodes,
        gpus=total,
        groups=[
            Group(*k, nodes=v[0], gpus=v[1])
            for k, v in sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))
        ],
        problems=sorted(problems, key=lambda p: (p.kind, p.node)),
        cuda=show_cuda(wanted) if wanted is not None else None,
        can_run=sorted(can_run),
    )
