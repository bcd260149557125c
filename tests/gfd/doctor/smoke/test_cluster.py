"""Smoke-test layers 1-4 (gfd/doctor/smoke/cluster.py), from hand-written Node and RuntimeClass JSON: which
layer a state is blamed on, what the evidence says and which fix is offered."""

from __future__ import annotations

from gfd.doctor.smoke import cluster as smoke_cluster
from gfd.doctor.smoke.model import ApiRead
from tests.gfd.doctor.smoke.shapes import LABELS, NODE, node, one


def test_a_missing_node_is_named():
    f = one(smoke_cluster.node(ApiRead(None, 404, "not found"), NODE))
    assert (f.status, f.evidence) == ("FAIL", f"no node named {NODE} in the cluster")
    assert "kubectl get nodes" in (f.fix or "")


def test_forbidden_reads_ask_for_the_admins_credentials():
    f = one(smoke_cluster.node(ApiRead(None, 403, "forbidden"), NODE))
    assert f.status == "FAIL" and "HTTP 403" in f.evidence and "admin's kubeconfig" in (f.fix or "")


def test_a_node_that_is_not_ready_or_cordoned_fails_layer_1():
    f = one(smoke_cluster.node(ApiRead(node(ready="Unknown")), NODE))
    assert f.status == "FAIL" and "is not Ready (Ready=Unknown; KubeletReady: ok)" in f.evidence
    f = one(smoke_cluster.node(ApiRead(node(unschedulable=True)), NODE))
    assert f.status == "FAIL" and "cordoned" in f.evidence and f"kubectl uncordon {NODE}" in (f.fix or "")
    f = one(smoke_cluster.node(ApiRead(node()), NODE))
    assert (f.status, f.evidence) == ("PASS", f"node {NODE} is Ready (v1.37.2, containerd://1.6.20)")


def test_labels_missing_partial_simulated_and_present():
    assert "none of this project's labels" in one(smoke_cluster.labels(node(labels={}))).evidence
    partial = one(smoke_cluster.labels(node(labels={"nvidia.com/gpu.present": "true"})))
    assert partial.status == "FAIL" and "nvidia.com/gpu.product, nvidia.com/gpu.count" in partial.evidence
    simulated = one(smoke_cluster.labels(node(labels=LABELS | {"nvidia.com/gpu.simulated": "true"})))
    assert simulated.status == "WARN"
    f = one(smoke_cluster.labels(node()))
    assert f.status == "PASS"
    assert f.evidence == (
        "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB, nvidia.com/gpu.count=8, "
        "nvidia.com/cuda.driver-version.full=550.54.15"
    )


def test_the_device_plugin_layer_reads_allocatable_and_tells_unhealthy_from_absent():
    assert one(smoke_cluster.device_plugin(node())).evidence == "allocatable nvidia.com/gpu=8 (capacity 8)"
    absent = one(smoke_cluster.device_plugin(node(gpus=None)))
    assert absent.status == "FAIL" and "the device plugin has not registered" in absent.evidence
    unhealthy = one(smoke_cluster.device_plugin(node(gpus="0", capacity="8")))
    assert unhealthy.status == "FAIL"
    assert unhealthy.evidence == (
        "nvidia.com/gpu capacity 8 but none allocatable: the device plugin has gone (the kubelet keeps the "
        "capacity for some minutes after) or reports every GPU unhealthy"
    )


def test_the_runtime_class_absent_present_or_not_asked_for():
    absent = one(smoke_cluster.runtime_class(ApiRead(None, 404, "not found"), "nvidia"))
    assert absent.status == "FAIL" and absent.evidence.startswith("no RuntimeClass nvidia")
    assert "metadata.name nvidia, handler nvidia" in (absent.fix or "")
    found = one(smoke_cluster.runtime_class(ApiRead({"handler": "nvidia-cdi"}), "nvidia"))
    assert (found.status, found.evidence) == ("PASS", "RuntimeClass nvidia exists (handler nvidia-cdi)")
    assert one(smoke_cluster.runtime_class(None, None)).status == "SKIP"
