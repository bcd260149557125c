"""The chart with its defaults on a real kubelet (only the image and, on this GPU-less machine, the mock
backend set): admitted under Pod Security `restricted`, Ready, labelling its Node with the token the kubelet
projected into the pod; `helm test`; an upgrade, a killed writer and a restarted kubelet without a label
ever disappearing; and the documented removal taking every owned label and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.helm import helm
from tests.node.cluster import NodeCluster
from tests.node.history import LabelHistory
from tests.node.release import (
    HELM,
    MOCK_PROFILE,
    MOCK_VALUES,
    NAMESPACE,
    NFD_PCI_LABEL,
    container_id,
    gfd_oneshot,
    install,
    owned,
    prepare_gpu_node,
    restarts,
    the_pod,
    uninstall_pruning,
    upgrade,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller"
WRITER = "system:serviceaccount:gpu-labeller:nfd-lite"
# Labels the admin set on the node before installing, under the writer's prefixes: never its to touch.
ADMIN_LABELS = {"nvidia.com/site": "lab-1", NFD_PCI_LABEL: "true"}
MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"  # the chart's default; the pod sees the host's


@pytest.fixture(scope="module")
def release(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("chart-on-node")
    prepare_gpu_node(cluster)
    cluster.kubectl("label", "node", cluster.node, "nvidia.com/site=lab-1", "--overwrite")
    install(cluster, tmp, RELEASE, MOCK_VALUES)
    yield tmp
    uninstall_pruning(cluster, tmp, RELEASE)
    cluster.kubectl("label", "node", cluster.node, "nvidia.com/site-")


def expected_labels() -> dict[str, str]:
    return gfd_oneshot(
        "--backend", "mock", f"--mock-profile={MOCK_PROFILE}", "--mig-strategy=none",
        f"--machine-type-file={MACHINE_TYPE_FILE}",
    )  # fmt: skip


def written(cluster: NodeCluster) -> dict[str, str]:
    labels = owned(cluster.labels(cluster.node), besides=set(ADMIN_LABELS))
    labels.pop("nvidia.com/gfd.timestamp", None)
    return labels


def test_the_pod_is_admitted_under_restricted_and_becomes_ready(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    namespace = cluster.must("GET", f"/api/v1/namespaces/{NAMESPACE}")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = the_pod(cluster, RELEASE)
    assert pod["spec"]["nodeName"] == cluster.node
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert {c["name"] for c in pod["status"]["containerStatuses"]} == {"gfd", "nfd-lite"}
    assert restarts(pod, "gfd") == restarts(pod, "nfd-lite") == 0


def test_labels_appear_written_with_the_token_the_kubelet_projected(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    expected = expected_labels()
    wait_until(lambda: written(cluster) == expected, 60, f"node labels {written(cluster)} == {expected}")
    pod = the_pod(cluster, RELEASE)
    patches = [
        e
        for e in cluster.requests(WRITER)
        if e["verb"] == "patch"
        and e["objectRef"].get("name") == cluster.node
        and e["objectRef"]["resource"] == "nodes"
    ]
    assert patches, "no PATCH of the node by the writer's service account"
    extra = patches[-1]["user"]["extra"]
    # The claims of a token the kubelet requested for this very pod on this very node.
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert extra["authentication.kubernetes.io/node-name"] == [cluster.node]
    assert extra["authentication.kubernetes.io/node-uid"] == [
        cluster.get_node(cluster.node)["metadata"]["uid"]
    ]


def test_helm_test_passes(node_with_image: NodeCluster, release: Path) -> None:
    done = helm(HELM, node_with_image, release, "test", RELEASE, "-n", NAMESPACE, "--timeout", "90s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Phase:          Succeeded" in done.stdout


def test_an_upgrade_rolls_the_pod_without_a_label_disappearing(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    before = the_pod(cluster, RELEASE)["metadata"]["uid"]
    keys = set(expected_labels())
    with LabelHistory(cluster, cluster.node) as history:
        upgrade(cluster, release, RELEASE, "gfd.sleepInterval=20s")
        after = the_pod(cluster, RELEASE)
        wait_until(lambda: set(written(cluster)) == keys, 60, "labels back after the roll")
    assert after["metadata"]["uid"] != before, "the upgrade did not replace the pod"
    assert (
        "--sleep-interval=20s" in next(c for c in after["spec"]["containers"] if c["name"] == "gfd")["args"]
    )
    assert history.missing(keys) == [], "labels disappeared during the rolling update"


def test_a_killed_writer_is_restarted_by_the_kubelet_without_a_label_flapping(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    pod = the_pod(cluster, RELEASE)
    keys = set(written(cluster))
    with LabelHistory(cluster, cluster.node) as history:
        killed = cluster.ctr("tasks", "kill", "--signal", "SIGKILL", container_id(pod, "nfd-lite"))
        assert killed.returncode == 0, killed.stderr
        wait_until(lambda: restarts(the_pod(cluster, RELEASE), "nfd-lite") == 1, 90, "nfd-lite restarted")
    assert the_pod(cluster, RELEASE)["metadata"]["uid"] == pod["metadata"]["uid"]
    assert history.missing(keys) == []
    assert set(written(cluster)) == keys


def test_a_kubelet_restart_keeps_the_pod_and_every_label(node_with_image: NodeCluster, release: Path) -> None:
    cluster = node_with_image
    pod = the_pod(cluster, RELEASE)
    keys = set(written(cluster))
    with LabelHistory(cluster, cluster.node) as history:
        cluster.restart_kubelet()
        wait_until(cluster.node_ready, 60, "node Ready again")
        again = the_pod(cluster, RELEASE)
    assert again["metadata"]["uid"] == pod["metadata"]["uid"]
    assert history.missing(keys) == []


def test_removal_with_prune_takes_every_owned_label_and_nothing_else(
    node_with_image: NodeCluster, release: Path
) -> None:
    cluster = node_with_image
    before = cluster.labels(cluster.node)
    ours = set(owned(before, besides=set(ADMIN_LABELS)))
    assert "nvidia.com/gpu.product" in ours
    uninstall_pruning(cluster, release, RELEASE)
    after = cluster.labels(cluster.node)
    assert not ours & set(after), f"left behind: {ours & set(after)}"
    assert after == {k: v for k, v in before.items() if k not in ours}
