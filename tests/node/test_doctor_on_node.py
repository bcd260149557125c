"""`gfd doctor`'s Kubernetes layer against the real node, run as an admin runs it on the GPU host: each state
of the cluster produced for real (no RuntimeClass, no device plugin, none of our labels; then all of them;
then the device plugin gone) and diagnosed as such.

The host's lower layers are a GPU host tree (tests/fixtures/hosts/healthy-pci, two GPUs) whose containerd
config is the real node's (nvidia is a runtime there, not the default; its binary the toolkit stand-in),
and its NVML is NVIDIA's mock library serving the same two GPUs the node's runtime gives its pods."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.controlplane import ROOT
from tests.node.cluster import MOCK_NVML, TOOLKIT_STANDIN, NodeCluster
from tests.node.device_plugin import allocatable_gpus, device_plugin
from tests.node.release import IMAGE, install, prepare_gpu_node, uninstall_pruning, wait_until
from tests.node.workloads import apply, delete

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-doctor"
MACHINE = {"MOCK_NVML_MACHINE": "dgxa100", "MOCK_NVML_NUM_DEVICES": "2"}  # healthy-pci has two GPUs
HOST = ROOT / "tests" / "fixtures" / "hosts" / "healthy-pci"


@pytest.fixture(scope="module")
def host(gpu_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cluster = gpu_node
    root = tmp_path_factory.mktemp("doctor") / "host"
    shutil.copytree(HOST, root, symlinks=True)
    # The two GPUs where the mock's NVML says they sit, and as the pod's gfd sees them there: this machine's
    # sysfs has no class file for the mock's bus ids, so both say gpu.mode=unknown.
    devices = root / "sys" / "bus" / "pci" / "devices"
    for tree, mock in (("0000:07:00.0", "0000:10:00.0"), ("0000:0f:00.0", "0000:11:00.0")):
        (devices / tree).rename(devices / mock)
        (devices / mock / "class").unlink()
    shutil.copy(cluster.workdir / "containerd.toml", root / "etc" / "containerd" / "config.toml")
    standin = root / str(TOOLKIT_STANDIN).lstrip("/")  # the runtime binary that config names
    standin.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOOLKIT_STANDIN, standin)
    cluster.set_toolkit(MACHINE)
    yield root
    delete(cluster, "kube-system", "nvidia-device-plugin", kind="daemonset")
    uninstall_pruning(cluster, root.parent, RELEASE)
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})


def doctor(cluster: NodeCluster, root: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """The real `gfd doctor --json` and its Kubernetes findings by name."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root.parent),
        "LD_LIBRARY_PATH": str(MOCK_NVML.parent),
        **MACHINE,
    }
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "gfd"), "doctor", "--json", "--host-root", str(root),
         "--node", cluster.node, "--kubeconfig", str(cluster.admin_kubeconfig)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = json.loads(done.stdout)
    below = [c for c in report["checks"] if c["layer"] < 7 and c["status"] == "FAIL"]
    assert not below, f"the host's own layers should pass: {below}"
    return done.returncode, {c["name"]: c for c in report["checks"] if c["layer"] == 7}


def test_a_node_with_nothing_above_the_toolkit_fails_on_each_missing_piece(
    gpu_node: NodeCluster, host: Path
) -> None:
    cluster = gpu_node
    cluster.kubectl("delete", "runtimeclass", "nvidia", "--ignore-not-found")
    code, found = doctor(cluster, host)
    assert code == 1
    assert found["Kubernetes: labels"]["status"] == "FAIL"
    assert "none of this project's labels" in found["Kubernetes: labels"]["evidence"]
    assert found["Kubernetes: allocatable"]["status"] == "FAIL"
    assert "the device plugin has not registered" in found["Kubernetes: allocatable"]["evidence"]
    assert found["Kubernetes: runtimeclass"]["status"] == "FAIL"
    assert "no RuntimeClass nvidia" in found["Kubernetes: runtimeclass"]["evidence"]


def test_a_node_with_the_whole_stack_passes(gpu_node: NodeCluster, host: Path) -> None:
    cluster = gpu_node
    prepare_gpu_node(cluster)
    install(cluster, host.parent, RELEASE, {"image": IMAGE})
    apply(cluster, device_plugin())
    wait_until(lambda: allocatable_gpus(cluster) == 2, 90, "two GPUs advertised")
    wait_until(lambda: "nvidia.com/gpu.product" in cluster.labels(cluster.node), 60, "labels written")
    code, found = doctor(cluster, host)
    assert {name: f["status"] for name, f in found.items()} == {
        "Kubernetes: labels": "PASS",
        "Kubernetes: allocatable": "PASS",
        "Kubernetes: dra": "SKIP",  # no DRA driver on this node: its GPUs are the device plugin's
        "Kubernetes: runtimeclass": "PASS",
    }, found
    assert code == 0
    assert (
        found["Kubernetes: allocatable"]["evidence"] == f"node {cluster.node} allocatable: nvidia.com/gpu=2"
    )
    assert "(handler nvidia)" in found["Kubernetes: runtimeclass"]["evidence"]


def test_a_node_whose_device_plugin_left_fails_on_allocatable_only(gpu_node: NodeCluster, host: Path) -> None:
    cluster = gpu_node
    delete(cluster, "kube-system", "nvidia-device-plugin", kind="daemonset")
    wait_until(lambda: allocatable_gpus(cluster) == 0, 90, "the kubelet withdraws the GPUs")
    code, found = doctor(cluster, host)
    assert code == 1
    assert found["Kubernetes: allocatable"]["status"] == "FAIL"
    assert found["Kubernetes: labels"]["status"] == found["Kubernetes: runtimeclass"]["status"] == "PASS"
