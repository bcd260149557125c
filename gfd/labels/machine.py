"""``nvidia.com/gpu.machine``: the node's machine type (DMI product name)."""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels import sanitize
from gfd.labels.common import LabelOptions, Labels

UNKNOWN = "unknown"


def machine_value(machine: str | None) -> str:
    """NVIDIA's rule since v0.16: drop characters outside ``[A-Za-z0-9-_. ]``, join the words with ``-``.

    ``"PowerEdge  R750 "`` -> ``PowerEdge-R750``; ``unknown`` when there is no machine-type file, empty
    when it holds nothing usable (as NVIDIA writes both). Beyond NVIDIA, a result Kubernetes would
    refuse (too long, ending in ``.``) is fitted instead of dropped: ``To-Be-Filled-By-O.E.M``.
    """
    if machine is None:
        return UNKNOWN
    return sanitize.value(machine)


def machine_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    if not inv.devices:
        return {}  # as NVIDIA: a node without GPUs gets no device labels
    return {"nvidia.com/gpu.machine": machine_value(inv.machine)}
