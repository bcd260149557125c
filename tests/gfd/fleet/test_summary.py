"""The fleet view's core: Nodes as the API serves them in, groups and problems out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gfd.fleet.summary import (
    COUNT_MISMATCH,
    CUDA_TOO_OLD,
    DEGRADED,
    OTHER_WRITER,
    OWNED,
    UNLABELLED,
    summarize,
)

GOLDEN = Path(__file__).parents[1] / "golden"


def golden(name: str) -> dict[str, str]:
    lines = (GOLDEN / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def node(
    name: str, labels: dict[str, str], *, owned: bool = True, capacity: dict[str, str] | None = None
) -> dict[str, Any]:
    annotations = {OWNED: ",".join(sorted(labels))} if owned else {}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {"capacity": capacity or {}},
    }


H100 = golden("h100.single.labels")
T4 = golden("t4-cloud.none.labels")


def test_nodes_are_grouped_by_what_a_workload_selects_on() -> None:
    fleet = summarize(
        [
            node("h1", H100),
            node("h2", H100),
            node("t1", T4),
            node("cpu", {"kubernetes.io/os": "linux"}),
        ]
    )
    assert (fleet.nodes, fleet.gpu_nodes, fleet.gpus) == (4, 3, 8 + 8 + int(T4["nvidia.com/gpu.count"]))
    first = fleet.groups[0]
    assert (first.product, first.family, first.nodes, first.gpus) == (
        "NVIDIA-H100-80GB-HBM3",
        "hopper",
        2,
        16,
    )
    assert first.driver == H100["nvidia.com/cuda.driver-version.full"]
    assert fleet.problems == []


def test_gpu_count_is_compared_with_what_the_scheduler_can_hand_out() -> None:
    shared = {**T4, "nvidia.com/gpu.replicas": "4"}
    count = int(T4["nvidia.com/gpu.count"])
    fleet = summarize(
        [
            node("short", H100, capacity={"nvidia.com/gpu": "7"}),  # one GPU lost to the device plugin
            node("right", H100, capacity={"nvidia.com/gpu": "8"}),
            node("sliced", shared, capacity={"nvidia.com/gpu": str(count * 4)}),
            node("dra", H100),
        ],
        dra_gpus={"dra": 6},
    )
    assert [(p.node, p.kind) for p in fleet.problems] == [("dra", COUNT_MISMATCH), ("short", COUNT_MISMATCH)]
    assert "ResourceSlices" in fleet.problems[0].detail and "nvidia.com/gpu=7" in fleet.problems[1].detail


def test_the_mixed_mig_strategy_is_not_compared_with_full_gpu_capacity() -> None:
    mixed = golden("dgx-a100-mig-mixed.mixed.labels")
    assert summarize([node("a100", mixed, capacity={"nvidia.com/gpu": "2"})]).problems == []


def test_nvidia_hardware_without_gpu_labels_is_a_node_whose_labeller_is_gone() -> None:
    fleet = summarize(
        [node("bare", {"feature.node.kubernetes.io/pci-10de.present": "true"}), node("dra-only", {})],
        dra_gpus={"dra-only": 2},
    )
    assert [(p.node, p.kind) for p in fleet.problems] == [("bare", UNLABELLED), ("dra-only", UNLABELLED)]
    assert fleet.gpu_nodes == 0


def test_gpu_labels_the_writers_record_does_not_list_were_set_by_another_writer() -> None:
    theirs = node("theirs", H100, owned=False)
    mixed = node("mixed", H100)
    mixed["metadata"]["annotations"][OWNED] = "nvidia.com/gpu.count"
    fleet = summarize([theirs, mixed, node("ours", H100)])
    assert {p.node for p in fleet.problems if p.kind == OTHER_WRITER} == {"theirs", "mixed"}
    assert "more" in fleet.problems[0].detail
    assert "nvidia.com/gpu.present" not in str(fleet.problems)  # the GPU Operator sets that one too


def test_a_degraded_gpu_is_named_with_what_fails() -> None:
    sick = {
        **H100,
        "nvidia.com/gpu.health": "degraded",
        "nvidia.com/gpu.health.failing": "00000000-0000.3b.00.0",
    }
    fleet = summarize([node("sick", sick), node("well", {**H100, "nvidia.com/gpu.health": "ok"})])
    assert [(p.node, p.kind) for p in fleet.problems] == [("sick", DEGRADED)]
    assert "3b.00.0" in fleet.problems[0].detail
    assert {g.health for g in fleet.groups} == {"degraded", "ok"}


def test_which_nodes_can_run_an_image_built_with_a_cuda_release() -> None:
    old = {
        **H100,
        "nvidia.com/cuda.driver-version.full": "470.57.02",
        "nvidia.com/cuda.runtime-version.full": "11.4",
    }
    fleet = summarize([node("new", H100), node("old", old)], cuda="12.4")
    assert fleet.can_run == ["new"]
    assert [(p.node, p.kind) for p in fleet.problems] == [("old", CUDA_TOO_OLD)]
    assert "470.57.02" in fleet.problems[0].detail and "12.4" in fleet.problems[0].detail
    assert fleet.as_json()["cuda"] == {"version": "12.4", "canRun": ["new"]}


def test_a_bad_cuda_version_is_refused() -> None:
    with pytest.raises(ValueError, match="twelve"):
        summarize([], cuda="twelve")
