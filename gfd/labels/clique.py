"""``nvidia.com/gpu.clique``: ``<clusterUUID>.<cliqueId>`` of the GPU fabric (NVLink multi-node systems)."""

from __future__ import annotations

import logging

from gfd.inventory import Inventory
from gfd.labels.common import LabelOptions, Labels

log = logging.getLogger("gfd.labels")


def clique_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    cliques = {d.clique for d in inv.devices if d.clique}
    if not cliques:
        return {}
    if len(cliques) > 1:
        # Same as NVIDIA: GPUs disagreeing on their fabric means no clique label at all.
        log.warning("GPUs report different fabric cliques (%s); no clique label", ", ".join(sorted(cliques)))
        return {}
    return {"nvidia.com/gpu.clique": cliques.pop()}
