"""Jetson labels (gfd/labels/jetson.py): the board's facts, each left out when unknown."""

from __future__ import annotations

from gfd.inventory import Inventory, JetsonFacts
from tests.gfd.labels.build import T4, labels


def test_jetson_labels() -> None:
    facts = JetsonFacts(
        model="NVIDIA Jetson Orin Nano Developer Kit", soc="tegra234", l4t_version="36.4.0",
        jetpack_version="6.1", power_mode="15W",
    )  # fmt: skip
    got = labels(Inventory(backend="tegra", devices=(T4,), jetson=facts))
    assert got["nvidia.com/jetson.model"] == "NVIDIA-Jetson-Orin-Nano-Developer-Kit"
    assert got["nvidia.com/jetson.soc"] == "tegra234"
    assert got["nvidia.com/jetson.l4t-version"] == "36.4.0"
    assert got["nvidia.com/jetson.jetpack-version"] == "6.1"
    assert got["nvidia.com/jetson.power-mode"] == "15W"


def test_unknown_jetson_facts_are_left_out() -> None:
    got = labels(Inventory(backend="tegra", devices=(T4,), jetson=JetsonFacts(soc="tegra234")))
    assert [k for k in got if k.startswith("nvidia.com/jetson.")] == ["nvidia.com/jetson.soc"]
