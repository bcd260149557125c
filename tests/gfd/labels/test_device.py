"""Full-GPU labels: product, count, memory, architecture, mode, and mixed-model nodes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import pytest

from gfd.choices import MigStrategy
from gfd.inventory import Device, Inventory
from gfd.labels import LabelOptions, build_labels
from gfd.labels.device import family
from gfd.sharing_config import ReplicatedResource, ReplicatedResources, SharingConfig


def gpu(index: int, name: str = "Tesla T4", **kwargs: object) -> Device:
    kwargs.setdefault("memory_mib", 15360)
    kwargs.setdefault("compute_capability", (7, 5))
    return Device(index=index, name=name, **kwargs)  # type: ignore[arg-type]


def labels(*devices: Device) -> dict[str, str]:
    return build_labels(Inventory(backend="nvml", devices=devices), LabelOptions()).labels


@pytest.mark.parametrize(
    ("cc", "expected"),
    [
        ((1, 3), "tesla"),
        ((2, 1), "fermi"),
        ((3, 7), "kepler"),
        ((5, 3), "maxwell"),
        ((6, 2), "pascal"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 7), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),  # B200, GB200
        ((10, 3), "blackwell"),  # B300, GB300 (Blackwell Ultra)
        ((10, 7), "rubin"),  # Vera Rubin, sm_107 from CUDA 13.4; NVIDIA's GFD says "blackwell"
        ((11, 0), "blackwell"),  # Jetson Thor under CUDA 13; NVIDIA says "undefined"
        ((12, 0), "blackwell"),  # RTX 50, RTX PRO Blackwell
        ((12, 1), "blackwell"),  # GB10 (DGX Spark)
        ((4, 0), None),
        ((10, 5), None),  # a minor of 10 no GPU has reported: not guessed from the major
        ((13, 0), None),  # 13 is NVML's architecture number for Rubin, not a compute capability
        ((14, 0), None),
    ],
)
def test_family_by_compute_capability(cc: tuple[int, int], expected: str | None) -> None:
    assert family(*cc) == expected


def test_a_rubin_gpu_is_rubin_by_its_compute_capability_alone() -> None:
    got = build_labels(
        Inventory(backend="mock", devices=(gpu(0, "NVIDIA Graphics Device", compute_capability=(10, 7)),)),
        LabelOptions(),
    )
    assert got.labels["nvidia.com/gpu.family"] == "rubin"
    assert got.warnings == ()


@pytest.mark.parametrize(
    ("architecture", "cc", "expected"),
    [
        (13, (10, 7), "rubin"),  # NVML_DEVICE_ARCH_RUBIN
        (10, (10, 3), "blackwell"),
        (9, (9, 0), "hopper"),
        (13, (14, 2), "rubin"),  # NVML knows a capability the table does not: no warning either
        (0xFFFFFFFF, (10, 7), "rubin"),  # NVML_DEVICE_ARCH_UNKNOWN: the table stands in
        (12, (12, 0), "blackwell"),  # 12 is a DLA engine's number, never a GPU's: the table stands in
    ],
)
def test_nvmls_architecture_names_the_family_before_the_table(
    architecture: int, cc: tuple[int, int], expected: str
) -> None:
    device = gpu(0, "NVIDIA Graphics Device", compute_capability=cc, architecture=architecture)
    got = build_labels(Inventory(backend="nvml", devices=(device,)), LabelOptions())
    assert got.labels["nvidia.com/gpu.family"] == expected
    assert got.warnings == ()


def test_a_capability_newer_than_the_table_is_undefined_with_one_warning_and_every_other_label() -> None:
    device = gpu(0, "NVIDIA Graphics Device", memory_mib=300000, compute_capability=(14, 0))
    known = build_labels(
        Inventory(backend="nvml", devices=(gpu(0, "NVIDIA Graphics Device", memory_mib=300000),)),
        LabelOptions(),
    )
    got = build_labels(Inventory(backend="nvml", devices=(device,)), LabelOptions())
    assert got.labels["nvidia.com/gpu.family"] == "undefined"
    assert (got.labels["nvidia.com/gpu.compute.major"], got.labels["nvidia.com/gpu.compute.minor"]) == (
        "14",
        "0",
    )
    assert set(got.labels) == set(known.labels)
    (warning,) = got.warnings
    assert "14.0" in warning and "newer gpu-labeller" in warning and "\n" not in warning


def test_single_gpu_labels() -> None:
    got = labels(gpu(0))
    assert got["nvidia.com/gpu.product"] == "Tesla-T4"
    assert got["nvidia.com/gpu.count"] == "1"
    assert got["nvidia.com/gpu.memory"] == "15360"
    assert got["nvidia.com/gpu.family"] == "turing"
    assert (got["nvidia.com/gpu.compute.major"], got["nvidia.com/gpu.compute.minor"]) == ("7", "5")
    assert got["nvidia.com/gpu.replicas"] == "1"
    assert got["nvidia.com/gpu.sharing-strategy"] == "none"
    assert got["nvidia.com/mig.capable"] == "false"
    assert "nvidia.com/mig.strategy" not in got


def test_unknown_memory_and_compute_capability_are_left_out() -> None:
    got = labels(gpu(0, memory_mib=None, compute_capability=None))
    for key in ("memory", "family", "compute.major", "compute.minor"):
        assert f"nvidia.com/gpu.{key}" not in got
    assert got["nvidia.com/gpu.count"] == "1"


def test_zero_compute_capability_gives_no_architecture_labels() -> None:
    assert "nvidia.com/gpu.family" not in labels(gpu(0, compute_capability=(0, 0)))


def test_mixed_models_pick_the_model_with_most_gpus() -> None:
    got = labels(gpu(0, "NVIDIA RTX A6000", memory_mib=49140), gpu(1, "Tesla T4"), gpu(2, "Tesla T4"))
    assert got["nvidia.com/gpu.product"] == "Tesla-T4"
    assert got["nvidia.com/gpu.count"] == "2"
    assert got["nvidia.com/gpu.memory"] == "15360"
    assert got["nvidia.com/gpu.count.Tesla-T4"] == "2"
    assert got["nvidia.com/gpu.count.NVIDIA-RTX-A6000"] == "1"


def test_mixed_models_tie_goes_to_the_first_name_whatever_the_order() -> None:
    a = gpu(0, "Tesla V100-SXM2-16GB", compute_capability=(7, 0))
    b = gpu(1, "Tesla T4")
    assert labels(a, b)["nvidia.com/gpu.product"] == labels(b, a)["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels(a, b)["nvidia.com/gpu.family"] == "turing"


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        ((0x030200,), "compute"),
        ((0x030000,), "graphics"),
        ((0x030200, 0x030200), "compute"),
        ((0x038000,), "unknown"),
        ((None,), "unknown"),
        ((0x030200, 0x030000), "unknown"),
        # The whole class, programming interface included, as NVIDIA's getModeForClasses compares it.
        ((0x030001,), "unknown"),
        ((0x030201,), "unknown"),
        ((0x030200, 0x030201), "unknown"),
        ((0x030200, None), "unknown"),
    ],
)
def test_gpu_mode_from_pci_class(classes: tuple[int | None, ...], mode: str) -> None:
    devices = [gpu(i, pci_class=c) for i, c in enumerate(classes)]
    assert labels(*devices)["nvidia.com/gpu.mode"] == mode


def test_no_devices_gives_no_device_labels() -> None:
    # NVIDIA's device labeler writes nothing for a node without GPUs, not even gpu.machine.
    assert labels() == {}


def test_a_node_without_gpus_gets_only_what_needs_no_gpu() -> None:
    # Driver, CUDA, machine type, MPS sharing and every MIG strategy known, yet no GPU: no device labels.
    mps = SharingConfig(mps=ReplicatedResources(resources=(ReplicatedResource("nvidia.com/gpu", 2),)))
    when = datetime(2026, 1, 2, tzinfo=UTC)
    inv = Inventory(backend="mock", driver_version="550.54.15", cuda_driver_version=12040, machine="DGX")
    for strategy in get_args(MigStrategy):
        opts = LabelOptions(mig_strategy=strategy, sharing=mps, timestamp=when, with_vgpu=True)
        assert build_labels(inv, opts).labels == {
            "nvidia.com/gpu.simulated": "true",
            "nvidia.com/gfd.timestamp": str(int(when.timestamp())),
        }
