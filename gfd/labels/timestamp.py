"""``nvidia.com/gfd.timestamp``: Unix seconds of the labelling pass, only when asked for."""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels.common import LabelOptions, Labels

TIMESTAMP = "nvidia.com/gfd.timestamp"


def timestamp_labels(_inv: Inventory, opts: LabelOptions) -> Labels:
    when = opts.timestamp
    return {} if when is None else {TIMESTAMP: str(int(when.timestamp()))}
