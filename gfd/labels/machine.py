"""``nvidia.com/gpu.machine``: the node's machine type (DMI product name)."""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels import sanitize
from gfd.labels.common import Labels
from k8slabels import value_problem

UNKNOWN = "unknown"


def machine_value(machine: str | None) -> str:
    """NVIDIA's rule (trim, every space becomes ``-``); where that is no valid value, sanitise and fit.

    NVIDIA writes such a value anyway and Kubernetes drops it, e.g. for
    ``ProLiant DL380 Gen10 (P123)``; here it becomes ``ProLiant-DL380-Gen10-P123``.
    """
    if machine is None or not machine.strip():
        return UNKNOWN
    nvidia_style = machine.strip().replace(" ", "-")
    if value_problem(nvidia_style) is None:
        return nvidia_style
    return sanitize.value(machine) or UNKNOWN


def machine_labels(inv: Inventory) -> Labels:
    return {"nvidia.com/gpu.machine": machine_value(inv.machine)}
