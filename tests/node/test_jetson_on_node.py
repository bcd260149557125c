"""The chart's Jetson mode on the real node: an arm64 node with no NVIDIA PCI device gets the pod from the
chart's own Jetson affinity, and the pod labels the node from the tegra files mounted from the host.

The host files are a Jetson Orin Nano's (tests/fixtures/jetson/orin-nano-r36) laid out as on the board and
mounted by the chart's hostPath volumes; where the board has a symlink (/usr/local/cuda) the hostPath names
its target, as the kubelet resolves it on the board.

This machine is x86-64, and a kubelet re-asserts `kubernetes.io/arch` from its own build on every status
update (pkg/kubelet/kubelet_node_status.go), so no label makes this node arm64. The release takes the
chart's default Jetson affinity with `arm64` replaced by this node's arch and every other term kept (no
NVIDIA PCI device, no cloud accelerator label): what schedules the pod is still the chart's rule."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.controlplane import ROOT
from tests.node.cluster import NodeCluster
from tests.node.release import (
    IMAGE,
    NFD_PCI_LABEL,
    gfd_oneshot,
    install,
    owned,
    prepare_gpu_node,
    the_pod,
    uninstall_pruning,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-jetson"
NAMESPACE = "gpu-labeller-jetson"  # hostPath volumes: Pod Security privileged (docs/deploy.md)
BOARD = ROOT / "tests" / "fixtures" / "jetson" / "orin-nano-r36"
ARCH = "kubernetes.io/arch"


# The chart's default jetson.mounts: name, the file on this board, where the pod sees it, hostPath type.
MOUNTS = (
    ("nv-tegra-release", "etc/nv_tegra_release", "etc/nv_tegra_release", "File"),
    ("device-tree", "proc/device-tree", "proc/device-tree", "Directory"),
    ("soc0", "sys/devices/soc0", "sys/devices/soc0", "Directory"),
    ("meminfo", "proc/meminfo", "proc/meminfo", "File"),
    ("cuda", "usr/local/cuda-12.6", "usr/local/cuda", "Directory"),
    ("nvpmodel-conf", "etc/nvpmodel.conf", "etc/nvpmodel.conf", "File"),
    ("nvpmodel-status", "var/lib/nvpmodel", "var/lib/nvpmodel", "DirectoryOrCreate"),
)


def mounts(board: Path) -> list[dict[str, Any]]:
    """The chart's default jetson.mounts, with each hostPath where this board's file is."""
    return [
        {"name": name, "hostPath": str(board / on_board), "path": in_pod, "type": kind}
        for name, on_board, in_pod, kind in MOUNTS
    ]


@pytest.fixture(scope="module")
def jetson(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("jetson")
    board = cluster.workdir / "jetson-board"
    shutil.copytree(BOARD, board, symlinks=True)
    (board / "sys" / "devices" / "soc0").mkdir(parents=True)
    prepare_gpu_node(cluster)  # the `nvidia` RuntimeClass (JetPack's runtime has the same name)
    cluster.kubectl("label", "node", cluster.node, f"{NFD_PCI_LABEL}-")  # a Jetson's GPU is not on PCI
    jetson = {
        "enabled": True,
        "mounts": mounts(board),
        "affinity": affinity_for(cluster.labels(cluster.node)[ARCH]),
    }
    install(
        cluster,
        tmp,
        RELEASE,
        {"image": IMAGE, "jetson": jetson},
        namespace=NAMESPACE,
        pod_security="privileged",
    )
    yield cluster
    uninstall_pruning(cluster, tmp, RELEASE, namespace=NAMESPACE)


def affinity_for(arch: str) -> dict[str, Any]:
    """The chart's default jetson.affinity, for nodes of ``arch`` instead of arm64."""
    chart = yaml.safe_load((ROOT / "charts" / "gpu-labeller" / "values.yaml").read_text())
    text = json.dumps(chart["jetson"]["affinity"])
    assert text.count('"arm64"') == 1, "the chart's Jetson affinity changed: update this test"
    found: dict[str, Any] = json.loads(text.replace('"arm64"', json.dumps(arch)))
    return found


def test_the_jetson_pod_is_scheduled_by_the_charts_affinity_and_labels_the_board(jetson: NodeCluster) -> None:
    pod = the_pod(jetson, RELEASE, NAMESPACE)
    assert pod["spec"]["nodeName"] == jetson.node
    expected = gfd_oneshot("--backend", "tegra", f"--host-root={BOARD}")
    assert expected["nvidia.com/gpu.product"] == "NVIDIA-Jetson-Orin-Nano"

    def written() -> dict[str, str]:
        labels = owned(jetson.labels(jetson.node))
        labels.pop("nvidia.com/gfd.timestamp", None)
        return labels

    wait_until(lambda: written() == expected, 60, f"node labels {written()} == {expected}")
    assert "nvidia.com/jetson.jetpack-version" in written()
