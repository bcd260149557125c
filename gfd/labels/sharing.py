"""Sharing labels: replicas, sharing strategy, the -SHARED decision, mps.capable.

``config`` is ``None`` where NVIDIA disables sharing for a resource (a full
GPU that has MIG enabled): its replicas are then 0. Without a config file the
labelers go by an empty ``SharingConfig`` (``LabelOptions.sharing_or_default``):
replicas 1, strategy ``none``.
"""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import LabelOptions, LabelSet, flag, mig_on
from gfd.sharing_config import SharingConfig, SharingStrategy


def replicas(config: SharingConfig | None, resource: str) -> int:
    if config is None:
        return 0
    active = config.active()
    entry = active.find(resource) if active is not None else None
    return entry.replicas if entry is not None and entry.replicas > 0 else 1


def strategy(config: SharingConfig | None, resource: str) -> SharingStrategy:
    # The strategy is node-wide, but a resource that is not replicated reports "none".
    if config is None or replicas(config, resource) <= 1:
        return "none"
    return config.strategy()


def shows_shared(config: SharingConfig | None, resource: str) -> bool:
    """Whether the product gets ``-SHARED``: replicated and not renamed to ``<name>.shared``."""
    if config is None or replicas(config, resource) <= 1:
        return False
    active = config.active()
    return not (active is not None and active.is_renamed(resource))


def mps_labels(inv: Inventory, opts: LabelOptions) -> LabelSet:
    """``nvidia.com/mps.capable``: true when MPS sharing is configured and no GPU has MIG on.

    NVIDIA GFD fails the whole labelling pass when MPS meets a MIG-enabled GPU;
    here the node just reports ``false``, with a warning saying why.
    """
    if not inv.devices:
        return LabelSet()
    mps = opts.sharing_or_default.strategy() == "mps"
    if mps and any(mig_on(d) for d in inv.devices):
        warning = "MPS sharing is not supported on GPUs with MIG enabled; labelling mps.capable=false"
        return LabelSet({"nvidia.com/mps.capable": "false"}, (warning,))
    return LabelSet({"nvidia.com/mps.capable": flag(mps)})
