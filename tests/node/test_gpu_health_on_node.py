"""A GPU failing mid-run on the real node. The chart's gfd reads NVML through the `nvidia` runtime (the
stand-in for NVIDIA's container toolkit, which injects NVIDIA's mock NVML); one GPU of the simulated DGX
H100 is made to fail under it (a fault line in the mock's events file: `GPU is lost`) and answers again,
and a fatal Xid is reported on another. The Node's labels follow through nfd-lite within one sleep
interval (the Xid at once), no label goes missing in between, and the scheduler keeps a workload that
says `nvidia.com/gpu.health NotIn [degraded]` off the node while it is degraded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.node.cluster import NodeCluster
from tests.node.history import LabelHistory
from tests.node.images import BUSYBOX_IMAGE
from tests.node.release import IMAGE, install, prepare_gpu_node, uninstall_pruning, wait_until
from tests.node.workloads import apply, delete, describe, get_pod, pod, wait_phase

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-health"
MACHINE = "dgxh100"  # eight H100s
SLEEP = 10  # gfd's sleep interval, seconds
VALUES = {"image": IMAGE, "gfd": {"sleepInterval": f"{SLEEP}s"}}
HEALTH = "nvidia.com/gpu.health"
ANSWERING = "nvidia.com/gpu.health.answering"
FAILING = "nvidia.com/gpu.health.failing"
COUNT = "nvidia.com/gpu.count"
PRODUCT = "nvidia.com/gpu.product"
NOT_DEGRADED = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": HEALTH, "operator": "NotIn", "values": ["degraded"]}]}
            ]
        }
    }
}
# A label a pass takes at most this long to reach the Node after gfd has written it: the writer's watch,
# its PATCH and the watch event back.
PROPAGATION_S = 5


def inject(cluster: NodeCluster, line: str) -> float:
    """A line in the mock NVML's events file (``<gpu index> lost|answers|<xid>``); when it was written."""
    with open(cluster.events, "a") as events:
        events.write(line + "\n")
    return time.monotonic()


def health(cluster: NodeCluster) -> tuple[str | None, str | None, str | None]:
    labels = cluster.labels(cluster.node)
    return labels.get(HEALTH), labels.get(ANSWERING), labels.get(COUNT)


@pytest.fixture(scope="module")
def release(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("health")
    cluster.set_toolkit({"MOCK_NVML_MACHINE": MACHINE})
    prepare_gpu_node(cluster)
    install(cluster, tmp, RELEASE, VALUES)
    wait_until(lambda: health(cluster) == ("ok", "8", "8"), 90, f"healthy labels: {health(cluster)}")
    yield cluster
    for gpu in (3, 5):
        inject(cluster, f"{gpu} answers")
    uninstall_pruning(cluster, tmp, RELEASE)
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})


def avoider(name: str) -> dict[str, Any]:
    """A workload that keeps off degraded GPU nodes (no GPU request: the labels alone decide)."""
    return pod(name, BUSYBOX_IMAGE, ["sleep", "3600"], affinity=NOT_DEGRADED)


def unschedulable(cluster: NodeCluster, name: str) -> str:
    conditions = get_pod(cluster, "default", name)["status"].get("conditions", [])
    scheduled = next((c for c in conditions if c["type"] == "PodScheduled"), {})
    return str(scheduled.get("message", "")) if scheduled.get("reason") == "Unschedulable" else ""


def test_a_gpu_failing_mid_run_marks_the_node_degraded_and_keeps_notin_workloads_off(
    release: NodeCluster,
) -> None:
    cluster = release
    apply(cluster, avoider("before"))
    wait_phase(cluster, "default", "before", "Running")  # the healthy node matches NotIn [degraded]
    delete(cluster, "default", "before")

    with LabelHistory(cluster, cluster.node) as history:
        failed_at = inject(cluster, "3 lost")
        wait_until(lambda: health(cluster) == ("degraded", "7", "7"), SLEEP + PROPAGATION_S, "degraded")
        degraded_after = time.monotonic() - failed_at
        labels = cluster.labels(cluster.node)
        assert labels[FAILING] == "1" and labels[PRODUCT] == "NVIDIA-H100-80GB-HBM3"

        apply(cluster, avoider("avoider"))
        wait_until(lambda: unschedulable(cluster, "avoider"), 60, describe(cluster, "default", "avoider"))
        assert "didn't match Pod's node affinity/selector" in unschedulable(cluster, "avoider")
        assert get_pod(cluster, "default", "avoider")["status"]["phase"] == "Pending"

        healed_at = inject(cluster, "3 answers")
        wait_until(lambda: health(cluster) == ("ok", "8", "8"), SLEEP + PROPAGATION_S, "healthy again")
        healthy_after = time.monotonic() - healed_at
        wait_phase(cluster, "default", "avoider", "Running")  # scheduled once the node is healthy again
        delete(cluster, "default", "avoider")

    # Said once, though several passes saw it: the GPU, its address, NVML's error name, the layer.
    (lost,) = said(cluster, "GPU 3 (0000:13:00.0) cannot be used", "NVML_ERROR_GPU_IS_LOST")
    assert "(hardware: " in lost
    # One change each way, and no label of the node missing at any moment in between.
    assert history.values_of(HEALTH) == ["ok", "degraded", "ok"]
    assert history.values_of(COUNT) == ["8", "7", "8"]
    assert not history.missing({PRODUCT, "nvidia.com/gpu.present", "nvidia.com/cuda.driver-version.full"})
    print(f"degraded on the Node {degraded_after:.1f} s after the GPU failed, ", end="")
    print(f"healthy {healthy_after:.1f} s after it answered")


def test_a_fatal_xid_marks_its_gpu_degraded_at_once_until_it_was_reset(release: NodeCluster) -> None:
    cluster = release
    wait_until(lambda: health(cluster)[0] == "ok", SLEEP + PROPAGATION_S, "healthy")
    reported_at = inject(cluster, "5 79")  # GPU 5 fell off the bus, as the driver reports it
    # The event wakes gfd: the Node says so before the next pass was due.
    wait_until(
        lambda: health(cluster) == ("degraded", "7", "7"), SLEEP + PROPAGATION_S, "degraded by the Xid"
    )
    marked_after = time.monotonic() - reported_at
    time.sleep(SLEEP + 1)  # a pass later the GPU still answers NVML, and is still marked
    assert health(cluster)[0] == "degraded"
    inject(cluster, "5 lost")  # the reset: the GPU goes away for a moment (a pass sees it gone)...
    wait_until(lambda: said(cluster, "GPU 5", "NVML_ERROR_GPU_IS_LOST"), SLEEP + PROPAGATION_S, "reset seen")
    inject(cluster, "5 answers")  # ...and it answers again
    wait_until(lambda: health(cluster) == ("ok", "8", "8"), SLEEP + PROPAGATION_S, "healthy after the reset")
    print(f"degraded on the Node {marked_after:.1f} s after the Xid")


def gfd_log(cluster: NodeCluster) -> str:
    return cluster.kubectl("logs", "-n", "gpu-labeller", f"ds/{RELEASE}", "-c", "gfd").stdout


def said(cluster: NodeCluster, *words: str) -> list[str]:
    return [line for line in gfd_log(cluster).splitlines() if all(w in line for w in words)]
