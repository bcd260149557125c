"""Layer 7 against the fake API server: labels, allocatable GPUs, RuntimeClass; read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

NODE = "gpu-node-1"


def layer7(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"] if c["layer"] == 7}


def gfd_labels(root: Path) -> dict[str, str]:
    """What the real gfd would write for this host (its backend over the fake NVML, its labelers)."""
    from gfd.backends import detect
    from gfd.labels import LabelOptions, build_labels

    backend, inventory = detect("auto", host_root=root)
    return build_labels(inventory or backend.probe(), LabelOptions()).labels


@pytest.fixture
def cluster(apiserver, tmp_path):
    """(kubeconfig path) for an admin; the node is added by each test."""
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig", apiserver.admin_token())


def device_counts(fake: Any) -> int:
    return int(fake.calls.get("nvmlDeviceGetCount_v2", 0) + fake.calls.get("nvmlDeviceGetCount", 0))


def test_healthy_node_in_cluster(host, nvml, doctor, apiserver, cluster):
    fake = nvml("healthy-pci")
    root = host("healthy-pci")
    labels = gfd_labels(root)
    before = device_counts(fake)
    assert labels["nvidia.com/gpu.count"] == "2"  # the real labelers ran
    apiserver.add_node(NODE, labels=labels, allocatable={"cpu": "64", "nvidia.com/gpu": "2"})
    apiserver.add_runtime_class("nvidia")
    code, report = doctor(root, "--kubeconfig", str(cluster), "--node", NODE)
    k = layer7(report)
    assert code == 0, report
    assert k["Kubernetes: labels"]["status"] == "PASS"
    assert "agree with what gfd sees now" in k["Kubernetes: labels"]["evidence"]
    assert k["Kubernetes: allocatable"]["evidence"] == f"node {NODE} allocatable: nvidia.com/gpu=2"
    assert k["Kubernetes: runtimeclass"]["status"] == "PASS"
    # NVML read twice in the whole run: by layer 3, and once for the labels layer 7 compares
    assert device_counts(fake) - before == 2
    # read-only: two GETs, nothing written
    assert apiserver.count(method="GET", path=f"/api/v1/nodes/{NODE}") == 1
    assert apiserver.count(method="GET", path="/apis/node.k8s.io/v1/runtimeclasses/nvidia") == 1
    assert (
        apiserver.count(method="PATCH")
        == apiserver.count(method="PUT")
        == apiserver.count(method="POST")
        == 0
    )


def test_kubeconfig_from_the_environment_turns_layer_7_on(
    host, nvml, doctor, apiserver, cluster, monkeypatch
):
    nvml("healthy-pci")
    root = host("healthy-pci")
    apiserver.add_node(NODE, labels=gfd_labels(root), allocatable={"nvidia.com/gpu": "2"})
    monkeypatch.setenv("KUBECONFIG", str(cluster))
    monkeypatch.setenv("NODE_NAME", NODE)
    code, report = doctor(root)
    assert "Kubernetes: labels" in layer7(report)
    # the RuntimeClass is missing, but nvidia is this node's default runtime, so pods do not need it
    assert layer7(report)["Kubernetes: runtimeclass"]["status"] == "PASS"
    assert code == 0


def test_node_without_project_labels(host, nvml, doctor, apiserver, cluster):
    nvml("healthy-pci")
    apiserver.add_node(NODE, allocatable={"nvidia.com/gpu": "2"})
    code, report = doctor(host("healthy-pci"), "--kubeconfig", str(cluster), "--node", NODE)
    labels = layer7(report)["Kubernetes: labels"]
    assert code == 1 and labels["status"] == "FAIL"
    assert "none of this project's labels" in labels["evidence"]
    assert "DaemonSet" in labels["fix"]


def test_labels_that_disagree_with_the_host(host, nvml, doctor, apiserver, cluster):
    nvml("healthy-pci")
    root = host("healthy-pci")
    labels = gfd_labels(root) | {"nvidia.com/gpu.count": "4"}
    apiserver.add_node(NODE, labels=labels, allocatable={"nvidia.com/gpu": "2"})
    apiserver.add_runtime_class("nvidia")
    code, report = doctor(root, "--kubeconfig", str(cluster), "--node", NODE)
    got = layer7(report)["Kubernetes: labels"]
    assert code == 1 and got["status"] == "FAIL"
    assert "nvidia.com/gpu.count: node has 4, gfd sees 2" in got["evidence"]


def test_device_plugin_not_registered_and_no_runtime_class(host, nvml, doctor, apiserver, cluster):
    nvml("k3s")  # k3s keeps runc as the default runtime: pods need the RuntimeClass
    root = host("k3s")
    apiserver.add_node(NODE, labels=gfd_labels(root))
    code, report = doctor(root, "--kubeconfig", str(cluster), "--node", NODE)
    k = layer7(report)
    assert code == 1
    assert k["Kubernetes: allocatable"]["status"] == "FAIL"
    assert "device plugin has not registered" in k["Kubernetes: allocatable"]["evidence"]
    assert k["Kubernetes: runtimeclass"]["status"] == "FAIL"
    assert "handler nvidia" in k["Kubernetes: runtimeclass"]["fix"]


def test_missing_node_and_refused_credentials(host, nvml, doctor, apiserver, cluster, tmp_path):
    nvml("healthy-pci")
    root = host("healthy-pci")
    _, report = doctor(root, "--kubeconfig", str(cluster), "--node", "no-such-node")
    assert "node no-such-node not found" in layer7(report)["Kubernetes"]["evidence"]
    apiserver.add_node(NODE)
    # an identity with no RBAC grants at all
    weak = apiserver.write_kubeconfig(tmp_path / "weak", apiserver.token_for_user("nobody"))
    code, report = doctor(root, "--kubeconfig", str(weak), "--node", NODE)
    got = layer7(report)["Kubernetes"]
    assert code == 1 and "refused" in got["evidence"] and "HTTP 403" in got["evidence"]


def test_unreachable_api_server_is_a_fail_not_a_traceback(host, nvml, doctor, apiserver, cluster):
    nvml("healthy-pci")
    apiserver.add_node(NODE)
    apiserver.inject(path=f"/api/v1/nodes/{NODE}", status=503, count=None)
    code, report = doctor(host("healthy-pci"), "--kubeconfig", str(cluster), "--node", NODE)
    got = layer7(report)["Kubernetes"]
    assert code == 1 and got["status"] == "FAIL" and "503" in got["evidence"]


def test_layer_7_skipped_when_a_lower_layer_failed(host, nvml, doctor, apiserver, cluster):
    nvml("containerd-no-nvidia")
    apiserver.add_node(NODE)
    _, report = doctor(host("containerd-no-nvidia"), "--kubeconfig", str(cluster), "--node", NODE)
    assert layer7(report)["Kubernetes"]["evidence"] == "fix layer 6 first"
    assert apiserver.count() == 0


def test_guessed_node_name_not_in_the_cluster_only_warns(host, nvml, doctor, apiserver, cluster, monkeypatch):
    # a workstation with a kubeconfig for some other cluster is not a broken GPU stack
    nvml("healthy-pci")
    monkeypatch.setenv("KUBECONFIG", str(cluster))
    monkeypatch.setenv("NODE_NAME", "my-workstation")
    code, report = doctor(host("healthy-pci"))
    got = layer7(report)["Kubernetes"]
    assert code == 0 and got["status"] == "WARN" and "no node named my-workstation" in got["evidence"]
