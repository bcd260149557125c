"""``nvidia.com/gpu.clique``: ``<clusterUUID>.<cliqueId>`` of the GPU fabric (NVLink multi-node systems)."""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import LabelOptions, LabelSet


def clique_labels(inv: Inventory, _opts: LabelOptions) -> LabelSet:
    cliques = {d.clique for d in inv.devices if d.clique}
    if not cliques:
        return LabelSet()
    if len(cliques) > 1:
        # Same as NVIDIA: GPUs disagreeing on their fabric means no clique label at all.
        warning = f"GPUs report different fabric cliques ({', '.join(sorted(cliques))}); no clique label"
        return LabelSet(warnings=(warning,))
    return LabelSet({"nvidia.com/gpu.clique": cliques.pop()})
