"""Labels beyond NVIDIA GFD (gfd/labels/extras.py): gpu.present, gpu.simulated, the per-model count; and a
value Kubernetes would refuse is dropped with a warning."""

from __future__ import annotations

from gfd.inventory import Device, Inventory
from gfd.labels import LabelOptions, build_labels
from tests.gfd.labels.build import T4, labels


def test_present_on_gpu_nodes_only() -> None:
    assert labels(Inventory(backend="nvml", devices=(T4,)))["nvidia.com/gpu.present"] == "true"
    assert "nvidia.com/gpu.present" not in labels(Inventory(backend="nvml"))


def test_simulated_only_from_mock() -> None:
    assert labels(Inventory(backend="mock", devices=(T4,)))["nvidia.com/gpu.simulated"] == "true"
    assert labels(Inventory(backend="mock"))["nvidia.com/gpu.simulated"] == "true"
    assert "nvidia.com/gpu.simulated" not in labels(Inventory(backend="nvml", devices=(T4,)))


def test_per_model_count_for_an_overlong_model_name_stays_a_valid_key() -> None:
    name = "NVIDIA Experimental Accelerator With A Very Long Marketing Name"
    got = labels(Inventory(backend="nvml", devices=(Device(index=0, name=name),)))
    keys = [k for k in got if k.startswith("nvidia.com/gpu.count.")]
    assert len(keys) == 1
    assert len(keys[0].split("/", 1)[1]) <= 63
    assert got[keys[0]] == "1"


def test_invalid_values_are_dropped_with_a_warning() -> None:
    dev = Device(index=0, name="NVIDIA GB200", clique="not a valid/value")
    got = build_labels(Inventory(backend="nvml", devices=(dev,)), LabelOptions())
    assert "nvidia.com/gpu.clique" not in got.labels
    (warning,) = got.warnings
    assert warning.startswith("dropping label nvidia.com/gpu.clique='not a valid/value': ")
