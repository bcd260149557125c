"""Faults on a real node that only a kubelet can produce: gfd crash-looping after the "driver" broke under
it (the labels stay until their +expiry-time, then go, and come back with the driver), and the Node deleted
and registered again under the same name (the old pod's token names the old Node's uid; the labels on the
new Node come from a pod bound to it).

How the old pod goes: the new Node lacks the PCI label the chart's affinity asks for until NFD puts it back,
so the DaemonSet controller deletes the old pod, and makes a new one once the label is back. A Node that
comes back with a matching label already (kubelet --node-labels) keeps its old pod, whose writer is refused
until the kubelet refreshes its token: docs/real-node.md, "What the node found"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.cluster import MOCK_NVML, NodeCluster
from tests.node.history import LabelHistory
from tests.node.release import (
    IMAGE,
    container_id,
    install,
    prepare_gpu_node,
    release_pods,
    the_pod,
    uninstall_pruning,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-faults"
WRITER = "system:serviceaccount:gpu-labeller:nfd-lite"
PRODUCT = "nvidia.com/gpu.product"
SLEEP = 10  # seconds between gfd's passes; its labels expire 3 passes ahead (30 s)
VALUES = {"image": IMAGE, "gfd": {"sleepInterval": f"{SLEEP}s", "failOnInitError": True}}


@pytest.fixture(scope="module")
def release(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("faults")
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})
    prepare_gpu_node(cluster)
    install(cluster, tmp, RELEASE, VALUES)
    wait_until(lambda: PRODUCT in cluster.labels(cluster.node), 60, "labels written")
    yield tmp
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})
    prepare_gpu_node(cluster)  # the re-registered Node lost the admin's label
    uninstall_pruning(cluster, tmp, RELEASE)


def test_a_crash_looping_gfd_leaves_the_labels_until_they_expire_then_they_go(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    broken = cluster.workdir / "broken-libnvidia-ml.so.1"
    broken.write_bytes(b"not a shared library")  # what a half-finished driver upgrade leaves
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"}, library=broken)
    pod = the_pod(cluster, RELEASE)
    with LabelHistory(cluster, cluster.node) as history:
        killed_at = time.monotonic()
        assert cluster.ctr("tasks", "kill", "--signal", "SIGKILL", container_id(pod, "gfd")).returncode == 0
        wait_until(lambda: PRODUCT not in cluster.labels(cluster.node), 90, "labels gone after expiry")
    gone_at = next(t for t, labels in history.states if PRODUCT not in labels)
    # Written at most one pass before the kill, expiring 3 passes after writing: gone no sooner than
    # 2 passes after the kill, and not one moment absent before.
    assert gone_at - killed_at >= 2 * SLEEP - 2, f"labels went {gone_at - killed_at:.1f} s after gfd died"
    assert history.values_of(PRODUCT)[-1] is None and history.values_of(PRODUCT).count(None) == 1
    gfd = next(
        s for s in release_pods(cluster, RELEASE)[0]["status"]["containerStatuses"] if s["name"] == "gfd"
    )
    assert gfd["restartCount"] >= 1 and not gfd["ready"], "gfd should be failing, not running"

    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"}, library=MOCK_NVML)  # the driver is fixed
    cluster.kubectl("delete", "pod", "-n", "gpu-labeller", pod["metadata"]["name"], "--wait=false")
    wait_until(lambda: PRODUCT in cluster.labels(cluster.node), 90, "labels back with the driver")


def test_a_node_registered_again_is_labelled_by_a_pod_bound_to_the_new_node(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    old_pod = the_pod(cluster, RELEASE)
    old_uid = cluster.get_node(cluster.node)["metadata"]["uid"]
    cluster.kubectl("delete", "node", cluster.node)
    cluster.restart_kubelet()  # registers the Node anew, as a replaced machine's kubelet does
    new_uid = cluster.get_node(cluster.node)["metadata"]["uid"]
    assert new_uid != old_uid
    prepare_gpu_node(cluster, runtime_class=False)  # what NFD's worker would label again
    new_pod = the_pod(cluster, RELEASE)
    assert new_pod["metadata"]["uid"] != old_pod["metadata"]["uid"]
    deleted_by = [
        e["userAgent"]
        for e in cluster.requests()
        if e["verb"] == "delete" and e["objectRef"].get("name") == old_pod["metadata"]["name"]
    ]
    # The kubelet's own delete, once the containers stopped, comes after.
    assert deleted_by[0].endswith("/daemon-set-controller"), deleted_by
    wait_until(lambda: PRODUCT in cluster.labels(cluster.node), 90, "the new Node labelled")
    on_new_node = [
        e
        for e in cluster.requests(WRITER)
        if e["verb"] == "patch"
        and e["objectRef"].get("name") == cluster.node
        and e["user"].get("extra", {}).get("authentication.kubernetes.io/node-uid") != [old_uid]
        and e.get("responseStatus", {}).get("code") == 200
    ]
    assert on_new_node, "no successful PATCH of the new Node"
    for event in on_new_node:
        assert event["user"]["extra"]["authentication.kubernetes.io/node-uid"] == [new_uid]
        assert event["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [new_pod["metadata"]["uid"]]
    # Whatever the old pod's writer still tried against the new Node was refused: its token names the
    # old uid, which the admission policy compares with the Node's.
    stale = [
        e
        for e in cluster.requests(WRITER)
        if e["verb"] == "patch"
        and e["user"].get("extra", {}).get("authentication.kubernetes.io/node-uid") == [old_uid]
        and e["stageTimestamp"] > cluster.get_node(cluster.node)["metadata"]["creationTimestamp"]
    ]
    assert all(e.get("responseStatus", {}).get("code") != 200 for e in stale), stale
