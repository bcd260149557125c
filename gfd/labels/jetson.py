"""``nvidia.com/jetson.*``: what the tegra files say about a Jetson board (ours, not in NVIDIA GFD)."""

from __future__ import annotations

from gfd.inventory import Inventory
from gfd.labels import sanitize
from gfd.labels.common import LabelOptions, Labels


def jetson_labels(inv: Inventory, _opts: LabelOptions) -> Labels:
    facts = inv.jetson
    if facts is None:
        return {}
    known = {
        # "NVIDIA Jetson Orin Nano Developer Kit" -> "NVIDIA-Jetson-Orin-Nano-Developer-Kit"
        "model": facts.model,
        "soc": facts.soc,
        "l4t-version": facts.l4t_version,
        "jetpack-version": facts.jetpack_version,
        "power-mode": facts.power_mode,
    }
    labels: Labels = {}
    for name, text in known.items():
        if text is not None and (fitted := sanitize.value(text)):
            labels[f"nvidia.com/jetson.{name}"] = fitted
    return labels
