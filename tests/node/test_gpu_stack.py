"""The stack of the talk, bottom to top, on one real node: the "driver" (NVIDIA's mock NVML, serving a
simulated DGX H100), the container toolkit (our stand-in, the `nvidia` runtime handler, which injects
that library), our chart with its default backend reading NVML inside the pod, NVIDIA's device plugin
advertising the GPUs, and workloads that select our labels and request a GPU. README's "Target workloads",
proven: the scheduler places what our labels say fits and holds back what they say does not."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.node.cluster import NodeCluster
from tests.node.device_plugin import allocatable_gpus, device_plugin
from tests.node.images import PROJECT_IMAGE
from tests.node.release import IMAGE, install, owned, prepare_gpu_node, uninstall_pruning, wait_until
from tests.node.workloads import apply, delete, describe, get_pod, pod, wait_phase
from tests.parity import peers

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-nvml"
MACHINE = "dgxh100"
GPUS = 8
MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"  # the chart's default (absent on this machine)
# Only we write these (docs/labels.md, "Compared with NVIDIA's GFD").
OUR_EXTRAS = {
    "nvidia.com/gpu.present",
    "nvidia.com/cuda.runtime-version.code",
    "nvidia.com/gfd.timestamp",
    "nvidia.com/gpu.health",
    "nvidia.com/gpu.health.answering",
    "nvidia.com/gpu.health.failing",
}
SEES_ITS_GPUS = (
    "import os, pynvml; pynvml.nvmlInit(); n = pynvml.nvmlDeviceGetCount();"
    "h = pynvml.nvmlDeviceGetHandleByIndex(0);"
    "print(n, pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h), os.environ['NVIDIA_VISIBLE_DEVICES'])"
)


@pytest.fixture(scope="module")
def stack(gpu_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    cluster = gpu_node
    tmp = tmp_path_factory.mktemp("gpu-stack")
    cluster.set_toolkit({"MOCK_NVML_MACHINE": MACHINE})
    prepare_gpu_node(cluster)
    install(cluster, tmp, RELEASE, {"image": IMAGE})  # every other value as the chart ships it
    apply(cluster, device_plugin())
    yield cluster
    delete(cluster, "kube-system", "nvidia-device-plugin", kind="daemonset")
    uninstall_pruning(cluster, tmp, RELEASE)
    wait_until(lambda: allocatable_gpus(cluster) == 0, 60, "no GPUs allocatable once the plugin is gone")
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})


def nvidia_gfd_labels(tmp: Path) -> dict[str, str]:
    """NVIDIA's gpu-feature-discovery over the same machine, run here (the parity oracle)."""
    peers.require()
    out = tmp / "nvidia.labels"
    subprocess.run(
        [
            str(peers.NVIDIA_GFD), "--oneshot", "--no-timestamp", "--use-node-feature-api=false",
            "--device-discovery-strategy=nvml", f"--output-file={out}", "--mig-strategy=none",
            f"--machine-type-file={MACHINE_TYPE_FILE}",
        ],
        env=peers.mock_env(MACHINE),
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    pairs = (line.partition("=") for line in out.read_text().splitlines() if line)
    return {key: value for key, _, value in pairs}


def test_the_default_backend_reads_nvml_through_the_runtime_and_labels_as_nvidia_does(
    stack: NodeCluster, tmp_path: Path
) -> None:
    theirs = nvidia_gfd_labels(tmp_path)
    assert theirs["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"

    def ours() -> dict[str, str]:
        labels = owned(stack.labels(stack.node), besides={"feature.node.kubernetes.io/pci-10de.present"})
        return {
            k: v
            for k, v in labels.items()
            if k not in OUR_EXTRAS and not k.startswith("nvidia.com/gpu.count.")
        }

    wait_until(lambda: ours() == theirs, 90, f"node labels {ours()} == NVIDIA's {theirs}")
    assert "nvidia.com/gpu.simulated" not in stack.labels(stack.node)  # NVML, not the mock backend


def test_the_device_plugin_advertises_the_gpus(stack: NodeCluster) -> None:
    wait_until(lambda: allocatable_gpus(stack) == GPUS, 90, f"allocatable nvidia.com/gpu = {GPUS}")


def workload(name: str, product: str, **affinity: Any) -> dict[str, Any]:
    """The README's example: our labels select the node, the device plugin gives the GPU."""
    expressions = [
        {
            "key": "nvidia.com/cuda.runtime-version.code",
            "operator": "Gt",
            "values": ["12039"],
        },  # CUDA >= 12.4
        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": [affinity.get("memory_over", "40000")]},
    ]
    return pod(
        name,
        PROJECT_IMAGE,
        ["python3", "-c", SEES_ITS_GPUS],
        runtimeClassName="nvidia",
        nodeSelector={"nvidia.com/gpu.product": product},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": expressions}]
                }
            }
        },
        resources={"limits": {"nvidia.com/gpu": 1}},
        securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    )


def test_a_workload_that_selects_our_labels_is_scheduled_and_sees_its_gpu(stack: NodeCluster) -> None:
    wait_until(lambda: allocatable_gpus(stack) == GPUS, 90, "GPUs advertised")
    product = stack.labels(stack.node)["nvidia.com/gpu.product"]
    apply(stack, workload("trainer", product))
    wait_phase(stack, "default", "trainer", "Succeeded")
    count, uuid, *name_and_visible = stack.kubectl("logs", "-n", "default", "trainer").stdout.split()
    assert count == "1", "the container sees exactly the GPU it was given"
    assert name_and_visible[-1] == uuid  # the one the device plugin allocated (NVIDIA_VISIBLE_DEVICES)
    assert " ".join(name_and_visible[:-1]) == "NVIDIA H100 80GB HBM3"
    delete(stack, "default", "trainer")


def test_a_workload_the_labels_rule_out_stays_pending_with_the_schedulers_reason(stack: NodeCluster) -> None:
    apply(stack, workload("too-big", stack.labels(stack.node)["nvidia.com/gpu.product"], memory_over="90000"))
    apply(stack, workload("wrong-model", "NVIDIA-B200"))

    def unschedulable(name: str) -> str:
        condition = next(
            (
                c
                for c in get_pod(stack, "default", name)["status"].get("conditions", [])
                if c["type"] == "PodScheduled"
            ),
            {},
        )
        return str(condition.get("message", "")) if condition.get("reason") == "Unschedulable" else ""

    for name in ("too-big", "wrong-model"):
        wait_until(
            lambda n=name: unschedulable(n), 60, f"{name} unschedulable: {describe(stack, 'default', name)}"
        )
        assert "didn't match Pod's node affinity/selector" in unschedulable(name)
        assert get_pod(stack, "default", name)["status"]["phase"] == "Pending"
        delete(stack, "default", name)


def test_a_fatal_xid_makes_the_device_plugin_withdraw_that_gpu(stack: NodeCluster) -> None:
    """NVIDIA's own health check, unmodified, over the mock's event set: Xid 79 (GPU fell off the bus)."""
    wait_until(lambda: allocatable_gpus(stack) == GPUS, 90, "GPUs advertised")
    with open(stack.events, "a") as events:
        events.write("3 79\n")
    wait_until(lambda: allocatable_gpus(stack) == GPUS - 1, 60, f"allocatable {GPUS - 1} after Xid 79")
    logs = stack.kubectl("logs", "-n", "kube-system", "ds/nvidia-device-plugin").stdout
    assert "XidCriticalError: Xid=79" in logs, json.dumps(logs[-2000:])
