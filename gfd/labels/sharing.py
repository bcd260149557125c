"""Sharing labels: replicas, sharing strategy, the -SHARED decision, mps.capable.

``sharing`` is ``None`` where NVIDIA disables sharing for a resource (a full
GPU that has MIG enabled): its replicas are then 0. Without a config file the
labelers pass an empty ``SharingConfig``: replicas 1, strategy ``none``.
"""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import Labels, mig_on
from gfd.sharing import SharingConfig, SharingStrategy


def replicas(sharing: SharingConfig | None, resource: str) -> int:
    if sharing is None:
        return 0
    active = sharing.active()
    entry = active.find(resource) if active is not None else None
    return entry.replicas if entry is not None and entry.replicas > 0 else 1


def strategy(sharing: SharingConfig | None, resource: str) -> SharingStrategy:
    # The strategy is node-wide, but a resource that is not replicated reports "none".
    if sharing is None or replicas(sharing, resource) <= 1:
        return "none"
    return sharing.strategy()


def shows_shared(sharing: SharingConfig | None, resource: str) -> bool:
    """Whether the product gets ``-SHARED``: replicated and not renamed to ``<name>.shared``."""
    if sharing is None or replicas(sharing, resource) <= 1:
        return False
    active = sharing.active()
    return not (active is not None and active.is_renamed(resource))


def mps_labels(inv: Inventory, sharing: SharingConfig) -> Labels:
    """``nvidia.com/mps.capable``: true when MPS sharing is configured and no GPU has MIG on.

    NVIDIA GFD fails the whole labelling pass when MPS meets a MIG-enabled GPU;
    here the node just reports ``false`` (and the caller logs why).
    """
    capable = sharing.strategy() == "mps" and not any(mig_on(d) for d in inv.devices)
    return {"nvidia.com/mps.capable": "true" if capable else "false"}
