"""``nvidia.com/gfd.timestamp``: Unix seconds of the labelling pass, only when asked for."""

from __future__ import annotations

from datetime import datetime

from gfd.labels.common import Labels


def timestamp_labels(when: datetime | None) -> Labels:
    return {} if when is None else {"nvidia.com/gfd.timestamp": str(int(when.timestamp()))}
