"""``nvidia.com/gpu.health`` and its counts: whether every GPU of the node can be used (ours, not NVIDIA's).

``degraded`` when a GPU does not answer NVML, reported a fatal Xid, failed to join its fabric, or is on the
PCI bus without NVML reporting it; the other labels then describe the GPUs that answer. Written where the
backend can tell (NVML), on a node with a GPU that answers or fails; one ``NotIn [degraded]`` keeps
workloads off degraded nodes.
"""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import LabelOptions, Labels

HEALTH = "nvidia.com/gpu.health"
ANSWERING = "nvidia.com/gpu.health.answering"
FAILING = "nvidia.com/gpu.health.failing"
ON_BUS = "nvidia.com/gpu.health.on-bus"
OK = "ok"
DEGRADED = "degraded"


def health_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    health = inv.health
    if health is None or not (inv.devices or health.failures):
        return {}  # the backend cannot tell, or the node has no GPU
    labels = {
        HEALTH: DEGRADED if health.failures else OK,
        ANSWERING: str(len(inv.devices)),
        FAILING: str(len(health.failures)),
    }
    if health.on_bus is not None:
        labels[ON_BUS] = str(health.on_bus)
    return labels
