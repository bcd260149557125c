"""The DRA consistency check's pure part: NVIDIA DRA driver ResourceSlices, as its kubelet plugin writes
them, read into GPUs and compared with node labels."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.doctor.host.dra import DriverGpu, compare, gpus, quantity_bytes

A100 = "NVIDIA A100-SXM4-40GB"
LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB": "2",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/cuda.driver-version.full": "550.54.15",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4",
}


def device(
    name: str,
    kind: str,
    uuid: str,
    *,
    product: str = A100,
    memory: str | None = "40Gi",
    driver: str = "550.54.15",
    **extra: Any,
) -> dict[str, Any]:
    """A device as the driver publishes it: versions in semver form, memory in bytes as a quantity."""
    attributes: dict[str, Any] = {
        "type": {"string": kind},
        "uuid" if kind == "gpu" else "parentUUID": {"string": uuid},
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Ampere"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "driverVersion": {"version": driver},
        "cudaDriverVersion": {"version": "12.4.0"},
    }
    if kind == "mig":
        attributes["uuid"] = {"string": f"MIG-{uuid}-{name}"}
        attributes["profile"] = {"string": "1g.5gb"}
    found: dict[str, Any] = {"name": name, "attributes": attributes}
    if memory is not None:
        found["capacity"] = {"memory": {"value": memory}}
    return found | extra


def slice_of(*devices: dict[str, Any], generation: int = 1, pool: str = "node-1") -> dict[str, Any]:
    spec = {"driver": "gpu.nvidia.com", "nodeName": "node-1", "devices": list(devices)}
    spec["pool"] = {"name": pool, "generation": generation, "resourceSliceCount": 1}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": spec}


TWO_A100 = [slice_of(device("gpu-0", "gpu", "GPU-0"), device("gpu-1", "gpu", "GPU-1"))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40Gi", 40 << 30), ("42949672960", 42949672960), ("24564Mi", 24564 << 20), ("4e9", 4 * 10**9),
     ("500M", 500 * 10**6), ("1.5Gi", None), ("lots", None)],
)  # fmt: skip
def test_quantities_in_bytes(text: str, expected: int | None) -> None:
    assert quantity_bytes(text) == expected


def test_matching_slices_give_no_mismatch() -> None:
    found = gpus(TWO_A100)
    assert [g.uuid for g in found] == ["GPU-0", "GPU-1"]
    assert found[0] == DriverGpu("GPU-0", A100, 40 << 30, (8, 0), (550, 54, 15), (12, 4))
    assert compare(found, LABELS) == []


def test_every_disagreement_is_named_and_count_and_product_are_the_key_ones() -> None:
    labels = LABELS | {
        "nvidia.com/gpu.count": "3",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED",
        "nvidia.com/gpu.memory": "40000",
        "nvidia.com/gpu.compute.minor": "6",
        "nvidia.com/cuda.driver-version.full": "535.104.05",
        "nvidia.com/cuda.runtime-version.minor": "2",
    }
    del labels["nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB"]
    found = compare(gpus(TWO_A100), labels)
    assert [str(m) for m in found] == [
        "nvidia.com/gpu.count: driver 2, label 3",
        "nvidia.com/gpu.product: driver NVIDIA-A100-SXM4-40GB, label NVIDIA-A100-SXM4-40GB-SHARED",
        "nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB: driver 2, label (none)",
        "nvidia.com/gpu.memory: driver 40960 MiB, label 40000",
        "gpu.compute.major/minor: driver 8.0, label 8.6",
        "nvidia.com/cuda.driver-version.full: driver 550.54.15, label 535.104.05",
        "cuda.runtime-version: driver 12.4, label 12.2",
    ]
    assert [m.label for m in found if m.key] == ["nvidia.com/gpu.count", "nvidia.com/gpu.product"]


@pytest.mark.parametrize(("ours", "semver"), [("535.104.05", "535.104.5"), ("470.57", "470.57.0")])
def test_driver_versions_agree_across_semvers_spelling(ours: str, semver: str) -> None:
    slices = [
        slice_of(
            device("gpu-0", "gpu", "GPU-0", driver=semver), device("gpu-1", "gpu", "GPU-1", driver=semver)
        )
    ]
    assert compare(gpus(slices), LABELS | {"nvidia.com/cuda.driver-version.full": ours}) == []


def test_a_gpu_with_mig_on_counts_once_through_its_mig_devices() -> None:
    """Static MIG: the driver publishes the MIG devices of a GPU with MIG on, never the GPU itself."""
    slices = [
        slice_of(
            device("gpu-0", "gpu", "GPU-0"),
            device("gpu-1-mig-1g5gb-19-0", "mig", "GPU-1", memory="4864Mi"),
            device("gpu-1-mig-1g5gb-19-1", "mig", "GPU-1", memory="4864Mi"),
        )
    ]
    found = gpus(slices)
    assert [(g.uuid, g.memory_bytes) for g in found] == [("GPU-0", 40 << 30), ("GPU-1", None)]
    assert compare(found, LABELS) == []


def test_a_partitionable_gpus_memory_is_not_the_boards_and_is_not_compared() -> None:
    """DynamicMIG: the full GPU consumes counters; its memory capacity is the largest MIG profile's."""
    counters = [{"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": "40192Mi"}}}]
    gpu = device("gpu-0", "gpu", "GPU-0", memory="40192Mi", consumesCounters=counters)
    partition = device("gpu-0-mig-1g5gb-19-0", "mig", "GPU-0", memory="4864Mi")
    found = gpus([slice_of(gpu, partition)])
    assert [(g.uuid, g.memory_bytes) for g in found] == [("GPU-0", None)]
    labels = LABELS | {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB": "1"}
    assert compare(found, labels) == []


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    stale = slice_of(device("gpu-0", "gpu", "GPU-0"), device("gpu-9", "gpu", "GPU-9"), generation=1)
    newest = slice_of(device("gpu-0", "gpu", "GPU-0"), device("gpu-1", "gpu", "GPU-1"), generation=2)
    assert [g.uuid for g in gpus([stale, newest])] == ["GPU-0", "GPU-1"]


def test_mixed_models_compare_the_primary_model_and_each_models_count() -> None:
    l40 = "NVIDIA L40S"
    slices = [
        slice_of(
            device("gpu-0", "gpu", "GPU-0"),
            device("gpu-1", "gpu", "GPU-1"),
            device("gpu-2", "gpu", "GPU-2", product=l40, memory="46068Mi"),
        )
    ]
    labels = LABELS | {"nvidia.com/gpu.count.NVIDIA-L40S": "1"}
    assert compare(gpus(slices), labels) == []
    gone = LABELS | {"nvidia.com/gpu.count.NVIDIA-L40S": "1", "nvidia.com/gpu.count.Tesla-T4": "1"}
    assert [str(m) for m in compare(gpus(slices), gone)] == [
        "nvidia.com/gpu.count.Tesla-T4: driver 0, label 1"
    ]
    assert [str(m) for m in compare(gpus(slices), LABELS)] == [
        "nvidia.com/gpu.count.NVIDIA-L40S: driver 1, label (none)"
    ]


def test_vfio_and_unknown_devices_are_not_gpus_and_names_may_carry_the_drivers_domain() -> None:
    vfio = {"name": "gpu-vfio-0", "attributes": {"type": {"string": "vfio"}, "uuid": {"string": "GPU-7"}}}
    qualified = device("gpu-0", "gpu", "GPU-0")
    qualified["attributes"] = {f"gpu.nvidia.com/{k}": v for k, v in qualified["attributes"].items()}
    assert [g.uuid for g in gpus([slice_of(vfio, qualified)])] == ["GPU-0"]
    assert gpus([]) == [] and compare([], LABELS) == []
