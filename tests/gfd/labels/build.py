"""What the label tests share: a GPU, and the labels an inventory gets."""

from __future__ import annotations

from gfd.inventory import Device, Inventory
from gfd.labels import LabelOptions, build_labels

T4 = Device(index=0, name="Tesla T4", memory_mib=15360, compute_capability=(7, 5))


def labels(inv: Inventory, **opts: object) -> dict[str, str]:
    return build_labels(inv, LabelOptions(**opts)).labels  # type: ignore[arg-type]
