"""The timestamp label (gfd/labels/timestamp.py): only when asked for."""

from __future__ import annotations

from datetime import UTC, datetime

from gfd.inventory import Inventory
from tests.gfd.labels.build import T4, labels


def test_timestamp_only_when_asked_for() -> None:
    inv = Inventory(backend="nvml", devices=(T4,))
    assert "nvidia.com/gfd.timestamp" not in labels(inv)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert labels(inv, timestamp=when)["nvidia.com/gfd.timestamp"] == str(int(when.timestamp()))
