"""The DRA label set: hardware facts only, each equal to the device-plugin set's where both write it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings

from gfd.config import load_settings
from gfd.inventory import Device, Inventory, MigDevice
from gfd.labels import LabelOptions, build_labels
from gfd.settings import ConfigError
from gfd.sharing_config import ReplicatedResource, ReplicatedResources, SharingConfig
from tests.gfd.labels.test_properties import inventories, options

# What the device plugin's allocation decides, not the hardware (docs/labels.md, "The DRA label set").
ALLOCATION_KEYS = {"nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mps.capable"}
ALLOCATION_PREFIXES = ("nvidia.com/mig.strategy", "nvidia.com/mig-")

A100 = "NVIDIA A100-SXM4-40GB"
ONE_G = MigDevice(profile="1g.5gb", memory_mib=4864, multiprocessors=14, gi_slices=1, ci_slices=1)
MIG_GPU = Device(
    index=0, name=A100, memory_mib=40960, compute_capability=(8, 0), mig_capable=True, mig_enabled=True,
    mig_devices=(ONE_G, ONE_G),
)  # fmt: skip
TIME_SLICED = SharingConfig(
    time_slicing=ReplicatedResources((ReplicatedResource(name="nvidia.com/gpu", replicas=4),))
)


def inventory(*devices: Device) -> Inventory:
    return Inventory(backend="nvml", driver_version="550.54.15", cuda_driver_version=12040, devices=devices)


def dra(opts: LabelOptions) -> LabelOptions:
    return replace(opts, label_set="dra")


@settings(max_examples=100, deadline=None)
@given(inventories(), options)
def test_the_dra_set_writes_no_allocation_label_whatever_the_options(
    inv: Inventory, opts: LabelOptions
) -> None:
    labels = build_labels(inv, dra(opts)).labels
    assert not ALLOCATION_KEYS & labels.keys()
    assert not [k for k in labels if k.startswith(ALLOCATION_PREFIXES)]
    assert not labels.get("nvidia.com/gpu.product", "").endswith("-SHARED")


@settings(max_examples=100, deadline=None)
@given(inventories(), options)
def test_the_dra_set_is_the_device_plugin_set_without_sharing_or_mig_strategy_less_its_allocation_labels(
    inv: Inventory, opts: LabelOptions
) -> None:
    plain = replace(opts, mig_strategy="none", sharing=None)
    theirs = build_labels(inv, plain).labels
    ours = build_labels(inv, dra(opts)).labels
    assert ours == {k: v for k, v in theirs.items() if k not in ALLOCATION_KEYS}


def test_a_time_sliced_node_gets_the_plain_product_and_one_warning_saying_why() -> None:
    gpu = Device(index=0, name=A100, memory_mib=40960, compute_capability=(8, 0))
    shared = build_labels(inventory(gpu), LabelOptions(sharing=TIME_SLICED))
    assert shared.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"
    got = build_labels(inventory(gpu), LabelOptions(label_set="dra", sharing=TIME_SLICED))
    assert got.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got.labels["nvidia.com/gpu.count"] == "1"
    assert [w for w in got.warnings if "time-slicing sharing is ignored" in w] == [got.warnings[0]]


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_mig_gpus_are_labelled_as_the_full_gpus_they_are_with_a_warning(strategy: str) -> None:
    got = build_labels(inventory(MIG_GPU, replace(MIG_GPU, index=1)), LabelOptions("dra", strategy))  # type: ignore[arg-type]
    assert got.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got.labels["nvidia.com/gpu.count"] == "2"
    assert got.labels["nvidia.com/gpu.memory"] == "40960"
    assert got.labels["nvidia.com/mig.capable"] == "true"
    assert [w for w in got.warnings if f"MIG strategy {strategy} is ignored" in w]


def test_the_dra_set_keeps_the_hardware_families() -> None:
    gpu = Device(
        index=0, name=A100, memory_mib=40960, compute_capability=(8, 0), pci_class=0x030200,
        clique="61248eac-4785-4fbf-9cbd-231635e37e9d.1", vgpu_guest=False,
    )  # fmt: skip
    labels = build_labels(replace(inventory(gpu), machine="DGX A100"), LabelOptions(label_set="dra")).labels
    assert labels == {
        "nvidia.com/cuda.driver-version.full": "550.54.15",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime-version.code": "12040",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.clique": "61248eac-4785-4fbf-9cbd-231635e37e9d.1",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB": "1",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.machine": "DGX-A100",
        "nvidia.com/gpu.memory": "40960",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/vgpu.present": "false",
    }


def test_the_label_set_is_a_flag_and_a_variable_and_a_wrong_one_names_its_source() -> None:
    assert load_settings([], {}).label_set == "device-plugin"
    assert load_settings(["--label-set", "dra"], {}).label_set == "dra"
    assert load_settings([], {"GFD_LABEL_SET": "DRA"}).label_set == "dra"
    with pytest.raises(ConfigError, match=r"GFD_LABEL_SET.*expected one of device-plugin, dra, got 'gpu'"):
        load_settings([], {"GFD_LABEL_SET": "gpu"})
