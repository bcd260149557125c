"""The fabric clique label (gfd/labels/clique.py): written when every fabric GPU agrees."""

from __future__ import annotations

from gfd.inventory import Device, Inventory
from gfd.labels import LabelOptions, build_labels
from tests.gfd.labels.build import labels


def test_clique_when_all_fabric_gpus_agree() -> None:
    clique = "7f2a1c3e-1b2c-4d5e-8f90-a1b2c3d4e5f6.32766"
    devs = (
        Device(index=0, name="NVIDIA GB200", clique=clique),
        Device(index=1, name="NVIDIA GB200", clique=clique),
    )
    assert labels(Inventory(backend="nvml", devices=devs))["nvidia.com/gpu.clique"] == clique


def test_no_clique_when_gpus_disagree() -> None:
    devs = (
        Device(index=0, name="NVIDIA GB200", clique="u.1"),
        Device(index=1, name="NVIDIA GB200", clique="u.2"),
    )
    got = build_labels(Inventory(backend="nvml", devices=devs), LabelOptions())
    assert "nvidia.com/gpu.clique" not in got.labels
    assert got.warnings == ("GPUs report different fabric cliques (u.1, u.2); no clique label",)
