"""Layer 7 against the fake API server: labels, allocatable GPUs, RuntimeClass; read-only."""

from __future__ import annotations

from typing import Any

import pytest

NODE = "gpu-node-1"


def layer7(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"] if c["layer"] == 7}


# What gfd writes on the healthy-pci host (two A100-SXM4-40GB, driver 550.54.15, CUDA 12.4, no config
# file), as `kubectl get node --show-labels` shows them.
HEALTHY_PCI_LABELS = {
    "nvidia.com/gpu.health": "ok",
    "nvidia.com/gpu.health.answering": "2",
    "nvidia.com/gpu.health.failing": "0",
    "nvidia.com/gpu.health.on-bus": "2",
    "nvidia.com/cuda.driver-version.full": "550.54.15",
    "nvidia.com/cuda.driver-version.major": "550",
    "nvidia.com/cuda.driver-version.minor": "54",
    "nvidia.com/cuda.driver-version.revision": "15",
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "54",
    "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.runtime-version.code": "12040",
    "nvidia.com/cuda.runtime-version.full": "12.4",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB": "2",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/gpu.machine": "unknown",
    "nvidia.com/gpu.mode": "compute",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "false",
    "nvidia.com/mps.capable": "false",
}


@pytest.fixture
def cluster(apiserver, tmp_path):
    """(kubeconfig path) for an admin; the node is added by each test."""
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig", apiserver.admin_token())


def device_counts(fake: Any) -> int:
    return int(fake.calls.get("nvmlDeviceGetCount_v2", 0) + fake.calls.get("nvmlDeviceGetCount", 0))


def test_healthy_node_in_cluster(host, nvml, doctor, apiserver, cluster):
    fake = nvml("healthy-pci")
    root = host("healthy-pci")
    apiserver.add_node(NODE, labels=HEALTHY_PCI_LABELS, allocatable={"cpu": "64", "nvidia.com/gpu": "2"})
    apiserver.add_runtime_class("nvidia")
    code, report = doctor(root, "--kubeconfig", str(cluster), "--node", NODE)
    k = layer7(report)
    assert code == 0, report
    assert k["Kubernetes: labels"] == {
        "layer": 7,
        "name": "Kubernetes: labels",
        "purpose": "can pods be scheduled onto the GPU?",
        "status": "PASS",
        "evidence": f"node {NODE}: 30 labels agree with what gfd sees now",
        "fix": None,
    }
    assert k["Kubernetes: allocatable"]["evidence"] == f"node {NODE} allocatable: nvidia.com/gpu=2"
    assert k["Kubernetes: runtimeclass"]["status"] == "PASS"
    # NVML read once in the whole run: layer 7 labels what layer 3 read
    assert device_counts(fake) == 1
    # read-only: two GETs, nothing written
    assert apiserver.count(method="GET", path=f"/api/v1/nodes/{NODE}") == 1
    assert apiserver.count(method="GET", path="/apis/node.k8s.io/v1/runtimeclasses/nvidia") == 1
    assert (
        apiserver.count(method="PATCH")
        == apiserver.count(method="PUT")
        == apiserver.count(method="POST")
        == 0
    )


def test_the_machine_type_is_compared_as_the_daemon_writes_it(host, nvml, doctor, apiserver, cluster):
    nvml("healthy-pci")
    root = host("healthy-pci")
    dmi = root / "sys/class/dmi/id/product_name"
    dmi.parent.mkdir(parents=True, exist_ok=True)
    dmi.write_text("DGX A100\n")
    labels = HEALTHY_PCI_LABELS | {"nvidia.com/gpu.machine": "DGX-A100"}
    apiserver.add_node(NODE, labels=labels, allocatable={"nvidia.com/gpu": "2"})
    apiserver.add_runtime_class("nvidia")
    code, report = doctor(root, "--kubeconfig", str(cluster), "--node", NODE)
    assert layer7(report)["Kubernetes: labels"]["status"] == "PASS", report
    assert code == 0


def test_a_node_labelled_in_the_dra_set_is_compared_with_the_dra_set(host, nvml, doctor, apiserver, cluster):
    nvml("healthy-pci")
    allocation = {"nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mps.capable"}
    labels = {k: v for k, v in HEALTHY_PCI_LABELS.items() if k not in allocation}
    apiserver.add_node(NODE, labels=labels)
    code, report = doctor(host("healthy-pci"), "--kubeconfig", str(cluster), "--node", NODE)
    got = layer7(report)
    assert code == 1  # the allocatable GPUs below
    assert got["Kubernetes: labels"]["status"] == "PASS", report
    assert len(labels) == len(HEALTHY_PCI_LABELS) - len(allocation)
    agree = f"node {NODE}: {len(labels)} labels agree with what gfd sees now"
    assert got["Kubernetes: labels"]["evidence"] == agree
    # This API server has no ResourceSlices: not a DRA node, so the allocatable GPUs are missing.
    assert got["Kubernetes: dra"]["status"] == "SKIP"
    assert got["Kubernetes: allocatable"]["status"] == "FAIL"


def test_kubeconfig_from_the_environment_turns_layer_7_on(
    host, nvml, doctor, apiserver, cluster, monkeypatch
):
    nvml("healthy-pci")
    root = host("healthy-pci")
    apiserver.add_node(NODE, labels=HEALTHY_PCI_LABELS, allocatable={"nvidia.com/gpu": "2"})
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
    labels = HEALTHY_PCI_LABELS | {"nvidia.com/gpu.count": "4"}
    apiserver.add_node(NODE, labels=labels, allocatable={"nvidia.com/gpu": "2"})
    apiserver.add_runtime_class("nvidia")
    code, report = doctor(root, "--kubeconfig", str(cluster), "--node", NODE)
    got = layer7(report)["Kubernetes: labels"]
    assert code == 1 and got["status"] == "FAIL"
    assert "nvidia.com/gpu.count: node has 4, gfd sees 2" in got["evidence"]


def test_device_plugin_not_registered_and_no_runtime_class(host, nvml, doctor, apiserver, cluster):
    nvml("k3s")  # k3s keeps runc as the default runtime: pods need the RuntimeClass
    root = host("k3s")
    apiserver.add_node(NODE, labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L4"})
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
    k = layer7(report)
    assert k["Kubernetes"]["status"] == "SKIP"
    assert k["Kubernetes"]["evidence"] == "fix layer 6 first; what reads only the cluster ran anyway (below)"
    # Only the cluster's own consistency check ran (this fake serves no ResourceSlices): no label, allocatable
    # or RuntimeClass verdict rests on the broken layer, and only reads were sent.
    assert list(k) == ["Kubernetes", "Kubernetes: dra"]
    assert k["Kubernetes: dra"]["status"] == "SKIP"
    assert apiserver.count() == apiserver.count(method="GET") == 2


def test_from_a_workstation_the_dra_check_runs_though_the_hardware_layer_fails(
    tmp_path, nvml, doctor, apiserver, cluster, monkeypatch
):
    """`gfd doctor --node N --kubeconfig K` on a workstation: no GPU here, so layer 1 fails, yet what the
    cluster alone can answer (the DRA driver's slices against the node's labels) is answered."""
    from gfd.doctor.host import dra

    nvml(None, library_missing=True)
    workstation = tmp_path / "workstation"
    workstation.mkdir()
    apiserver.add_node(NODE, labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100"})
    # One GPU of the driver's slices, as NVIDIA's DRA driver publishes it (the fake server has no
    # resource.k8s.io; tests/kube/test_doctor_dra.py reads real slices from a real kube-apiserver).
    slices = [
        {
            "spec": {
                "driver": dra.DRIVER,
                "nodeName": NODE,
                "pool": {"name": NODE, "generation": 1},
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {
                            "type": {"string": "gpu"},
                            "uuid": {"string": "GPU-0"},
                            "productName": {"string": "NVIDIA H100"},
                        },
                    }
                ],
            }
        }
    ]
    asked: list[str] = []
    monkeypatch.setattr(dra, "read_slices", lambda api, node, timeout: asked.append(node) or slices)

    code, report = doctor(workstation, "--kubeconfig", str(cluster), "--node", NODE)

    assert code == 1 and report["first_failed_layer"] == 1
    got = layer7(report)["Kubernetes: dra"]
    assert asked == [NODE]
    assert got["status"] == "FAIL"
    assert got["evidence"].startswith(
        f"node {NODE}: DRA driver gpu.nvidia.com (1 GPUs) and the labels disagree"
    )
    assert "nvidia.com/gpu.count: driver 1, label 8" in got["evidence"]


def test_guessed_node_name_not_in_the_cluster_only_warns(host, nvml, doctor, apiserver, cluster, monkeypatch):
    # a workstation with a kubeconfig for some other cluster is not a broken GPU stack
    nvml("healthy-pci")
    monkeypatch.setenv("KUBECONFIG", str(cluster))
    monkeypatch.setenv("NODE_NAME", "my-workstation")
    code, report = doctor(host("healthy-pci"))
    got = layer7(report)["Kubernetes"]
    assert code == 0 and got["status"] == "WARN" and "no node named my-workstation" in got["evidence"]
