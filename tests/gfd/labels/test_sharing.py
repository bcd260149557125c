"""Sharing labels: replicas, sharing-strategy, the -SHARED suffix, renameByDefault, mps.capable."""

from __future__ import annotations

from gfd.inventory import Device, Inventory, MigDevice
from gfd.labels import LabelOptions, build_labels
from gfd.sharing_config import ReplicatedResource, ReplicatedResources, SharingConfig

T4 = Device(index=0, name="Tesla T4", memory_mib=15360, compute_capability=(7, 5))
ONE_G = MigDevice(profile="1g.5gb", memory_mib=4864, multiprocessors=14, gi_slices=1, ci_slices=1)
A100_MIG = Device(
    index=0, name="NVIDIA A100-SXM4-40GB", memory_mib=40960, compute_capability=(8, 0),
    mig_capable=True, mig_enabled=True, mig_devices=(ONE_G, ONE_G),
)  # fmt: skip


def shared(
    resource: str = "nvidia.com/gpu", replicas: int = 4, rename_by_default: bool = False
) -> ReplicatedResources:
    return ReplicatedResources(
        resources=(ReplicatedResource(name=resource, replicas=replicas),), rename_by_default=rename_by_default
    )


def labels(sharing: SharingConfig | None, *devices: Device, strategy: str = "none") -> dict[str, str]:
    inv = Inventory(backend="nvml", devices=devices or (T4,))
    opts = LabelOptions(mig_strategy=strategy, sharing=sharing)  # type: ignore[arg-type]
    return build_labels(inv, opts).labels


def test_no_config_means_one_replica_and_no_sharing() -> None:
    got = labels(None)
    assert (got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.sharing-strategy"]) == ("1", "none")
    assert got["nvidia.com/gpu.product"] == "Tesla-T4"
    assert got["nvidia.com/mps.capable"] == "false"


def test_time_slicing_adds_replicas_and_shared_suffix() -> None:
    got = labels(SharingConfig(time_slicing=shared()))
    assert got["nvidia.com/gpu.replicas"] == "4"
    assert got["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert got["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert got["nvidia.com/gpu.count"] == "1"  # physical GPUs, not replicas


def test_rename_by_default_drops_the_shared_suffix() -> None:
    got = labels(SharingConfig(time_slicing=shared(rename_by_default=True)))
    assert got["nvidia.com/gpu.product"] == "Tesla-T4"
    assert got["nvidia.com/gpu.replicas"] == "4"


def test_one_replica_is_not_sharing() -> None:
    got = labels(SharingConfig(time_slicing=shared(replicas=1)))
    assert (got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.sharing-strategy"]) == ("1", "none")
    assert got["nvidia.com/gpu.product"] == "Tesla-T4"


def test_other_resource_shared_leaves_full_gpu_alone() -> None:
    got = labels(SharingConfig(time_slicing=shared("nvidia.com/mig-1g.5gb")))
    assert (got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.sharing-strategy"]) == ("1", "none")


def test_mps_sharing_and_capability() -> None:
    got = labels(SharingConfig(mps=shared(replicas=2)))
    assert got["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert got["nvidia.com/gpu.replicas"] == "2"
    assert got["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert got["nvidia.com/mps.capable"] == "true"


def test_mps_takes_precedence_over_time_slicing() -> None:
    got = labels(SharingConfig(time_slicing=shared(replicas=8), mps=shared(replicas=2)))
    assert (got["nvidia.com/gpu.sharing-strategy"], got["nvidia.com/gpu.replicas"]) == ("mps", "2")


def test_mps_is_not_capable_with_mig_enabled_and_a_warning_says_why() -> None:
    inv = Inventory(backend="nvml", devices=(A100_MIG,))
    got = build_labels(inv, LabelOptions(sharing=SharingConfig(mps=shared(replicas=2))))
    assert got.labels["nvidia.com/mps.capable"] == "false"
    assert got.warnings == (
        "MPS sharing is not supported on GPUs with MIG enabled; labelling mps.capable=false",
    )


def test_mig_single_shares_the_mig_devices() -> None:
    got = labels(SharingConfig(time_slicing=shared()), A100_MIG, strategy="single")
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert (got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.count"]) == ("4", "2")


def test_mig_mixed_shares_only_the_named_profile() -> None:
    got = labels(SharingConfig(time_slicing=shared("nvidia.com/mig-1g.5gb", 2)), A100_MIG, strategy="mixed")
    assert got["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert got["nvidia.com/mig-1g.5gb.sharing-strategy"] == "time-slicing"
    # the full GPU has MIG on: never shared, replicas 0
    assert (got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.sharing-strategy"]) == ("0", "none")
