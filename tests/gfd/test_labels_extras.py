"""Labels beyond NVIDIA GFD, and the small families: machine, Jetson, vGPU, clique, timestamp."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gfd.inventory import Device, Inventory, JetsonFacts, VGpuInfo
from gfd.labels import LabelOptions, build_labels
from gfd.labels.machine import machine_value

T4 = Device(index=0, name="Tesla T4", memory_mib=15360, compute_capability=(7, 5))


def labels(inv: Inventory, **opts: object) -> dict[str, str]:
    return build_labels(inv, LabelOptions(**opts)).labels  # type: ignore[arg-type]


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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("DGX A100", "DGX-A100"),
        ("  g4dn.xlarge\n", "g4dn.xlarge"),
        ("PowerEdge  R750 ", "PowerEdge-R750"),  # NVIDIA's sanitising since v0.16: runs of spaces are one -
        ("ProLiant DL380 Gen10 (P123)", "ProLiant-DL380-Gen10-P123"),
        ("ThinkSystem SR675 V3 \u2122", "ThinkSystem-SR675-V3"),
        ("To Be Filled By O.E.M.", "To-Be-Filled-By-O.E.M"),  # NVIDIA keeps the final ".": no valid label
        (None, "unknown"),  # no machine-type file
        ("", ""),  # an empty one: NVIDIA writes the empty value
        ("()", ""),
    ],
)
def test_machine_value(raw: str | None, expected: str) -> None:
    assert machine_value(raw) == expected


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


def test_vgpu_labels_only_when_asked_for() -> None:
    dev = Device(
        index=0,
        name="GRID A100-40C",
        vgpu=VGpuInfo(host_driver_version="550.54.16", host_driver_branch="r550_00"),
    )
    inv = Inventory(backend="nvml", devices=(dev,))
    assert not any(k.startswith("nvidia.com/vgpu.") for k in labels(inv))
    got = labels(inv, with_vgpu=True)
    assert got["nvidia.com/vgpu.present"] == "true"
    assert got["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert got["nvidia.com/vgpu.host-driver-branch"] == "r550_00"


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


def test_timestamp_only_when_asked_for() -> None:
    inv = Inventory(backend="nvml", devices=(T4,))
    assert "nvidia.com/gfd.timestamp" not in labels(inv)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert labels(inv, timestamp=when)["nvidia.com/gfd.timestamp"] == str(int(when.timestamp()))


def test_invalid_values_are_dropped_with_a_warning() -> None:
    dev = Device(index=0, name="NVIDIA GB200", clique="not a valid/value")
    got = build_labels(Inventory(backend="nvml", devices=(dev,)), LabelOptions())
    assert "nvidia.com/gpu.clique" not in got.labels
    (warning,) = got.warnings
    assert warning.startswith("dropping label nvidia.com/gpu.clique='not a valid/value': ")
