"""MIG labels under the none, single and mixed strategies, including NVIDIA's invalid case."""

from __future__ import annotations

import pytest

from gfd.inventory import Device, Inventory, MigDevice
from gfd.labels import LabelOptions, build_labels

A100 = "NVIDIA A100-SXM4-40GB"
ONE_G = MigDevice(
    profile="1g.5gb", memory_mib=4864, multiprocessors=14, gi_slices=1, ci_slices=1, copy_engines=1
)
ONE_G_ME = MigDevice(
    profile="1g.5gb+me", memory_mib=4864, multiprocessors=14, gi_slices=1, ci_slices=1, copy_engines=1,
    decoders=1, jpegs=1, ofas=1,
)  # fmt: skip
THREE_G = MigDevice(
    profile="3g.20gb", memory_mib=20096, multiprocessors=42, gi_slices=3, ci_slices=3, decoders=2
)


def a100(index: int, *migs: MigDevice, enabled: bool = True) -> Device:
    return Device(
        index=index, name=A100, memory_mib=40960, compute_capability=(8, 0), pci_class=0x030200,
        mig_capable=True, mig_enabled=enabled, mig_devices=migs,
    )  # fmt: skip


def labels(strategy: str, *devices: Device) -> dict[str, str]:
    opts = LabelOptions(mig_strategy=strategy)  # type: ignore[arg-type]
    return build_labels(Inventory(backend="nvml", devices=devices), opts).labels


def test_none_labels_mig_gpus_as_full_gpus_without_replicas() -> None:
    got = labels("none", a100(0, ONE_G, ONE_G))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got["nvidia.com/gpu.count"] == "1"
    assert got["nvidia.com/gpu.replicas"] == "0"
    assert got["nvidia.com/gpu.memory"] == "40960"
    assert got["nvidia.com/mig.capable"] == "true"
    assert "nvidia.com/mig.strategy" not in got
    assert not any(k.startswith("nvidia.com/mig-") for k in got)


def test_single_uniform_profile_makes_mig_devices_the_gpus() -> None:
    got = labels("single", a100(0, ONE_G, ONE_G), a100(1, ONE_G))
    assert got["nvidia.com/mig.strategy"] == "single"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert got["nvidia.com/gpu.count"] == "3"
    assert got["nvidia.com/gpu.replicas"] == "1"
    assert got["nvidia.com/gpu.memory"] == "4864"
    assert got["nvidia.com/gpu.multiprocessors"] == "14"
    assert (got["nvidia.com/gpu.slices.gi"], got["nvidia.com/gpu.slices.ci"]) == ("1", "1")
    assert got["nvidia.com/gpu.engines.copy"] == "1"
    assert got["nvidia.com/gpu.engines.decoder"] == "0"
    assert got["nvidia.com/gpu.family"] == "ampere"  # kept from the full GPU


def test_single_without_mig_enabled_behaves_like_none() -> None:
    got = labels("single", a100(0, enabled=False))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got["nvidia.com/gpu.replicas"] == "1"
    assert got["nvidia.com/mig.strategy"] == "single"


@pytest.mark.parametrize(
    "devices",
    [
        pytest.param((a100(0, ONE_G, THREE_G),), id="two-profiles-on-one-gpu"),
        pytest.param((a100(0, ONE_G), a100(1, THREE_G)), id="two-profiles-on-two-gpus"),
        pytest.param((a100(0, ONE_G), a100(1, enabled=False)), id="mig-next-to-full-gpu"),
        pytest.param((a100(0, ONE_G), a100(1)), id="mig-enabled-but-empty"),
    ],
)
def test_single_invalid_cases(devices: tuple[Device, ...]) -> None:
    labelled = build_labels(Inventory(backend="nvml", devices=devices), LabelOptions(mig_strategy="single"))
    got = labelled.labels
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert got["nvidia.com/gpu.count"] == "0"
    assert got["nvidia.com/gpu.replicas"] == "0"
    assert got["nvidia.com/gpu.memory"] == "0"
    assert got["nvidia.com/gpu.sharing-strategy"] == ""  # empty, as NVIDIA writes it
    (warning,) = labelled.warnings
    assert warning.startswith("MIG strategy single does not fit this node (")
    assert warning.endswith("); labelling it NVIDIA A100-SXM4-40GB-MIG-INVALID")


def test_mixed_gives_one_resource_per_profile() -> None:
    got = labels("mixed", a100(0, ONE_G, ONE_G, THREE_G), a100(1, ONE_G_ME), a100(2, enabled=False))
    assert got["nvidia.com/mig.strategy"] == "mixed"
    assert got["nvidia.com/mig-1g.5gb.count"] == "2"
    assert got["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert got["nvidia.com/mig-3g.20gb.count"] == "1"
    assert got["nvidia.com/mig-3g.20gb.memory"] == "20096"
    assert got["nvidia.com/mig-3g.20gb.engines.decoder"] == "2"
    # "+me" becomes ".me" in the resource name and the product
    assert got["nvidia.com/mig-1g.5gb.me.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me"
    assert got["nvidia.com/mig-1g.5gb.me.engines.ofa"] == "1"
    assert got["nvidia.com/mig-1g.5gb.me.replicas"] == "1"
    # full-GPU labels stay: all three GPUs, and a whole GPU on the node gives replicas 1
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got["nvidia.com/gpu.count"] == "3"
    assert got["nvidia.com/gpu.replicas"] == "1"


def test_mixed_ignores_mig_enabled_gpus_without_mig_devices() -> None:
    got = labels("mixed", a100(0), a100(1, ONE_G))
    assert got["nvidia.com/mig-1g.5gb.count"] == "1"
    assert not any(k.startswith("nvidia.com/mig-") and "1g.5gb" not in k for k in got)


def test_mig_capable_is_true_if_any_gpu_can() -> None:
    plain = Device(index=1, name=A100, memory_mib=40960)
    assert labels("none", a100(0, enabled=False), plain)["nvidia.com/mig.capable"] == "true"
    assert labels("none", plain)["nvidia.com/mig.capable"] == "false"
