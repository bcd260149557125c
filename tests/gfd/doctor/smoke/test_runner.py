"""`gfd doctor --smoke-test` against the real kube-apiserver (tests/kube), which has no kubelet and no
scheduler: what the doctor asks of the API, that it makes no pod for a node that cannot take one, and that
its pod is deleted on timeout, Ctrl-C and SIGTERM. The real node (tests/node/test_smoke_on_node.py) runs
the pod."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gfd.doctor.cli import main
from tests.gfd.doctor.smoke.shapes import LABELS
from tests.kube.controlplane import ControlPlane
from tests.waiting import eventually

SELECTOR = "app.kubernetes.io/name=gfd-smoke-test"
CLIENT = "OpenAPI-Generator/"  # the official client's user agent


@pytest.fixture
def gpu_node(kube_session: ControlPlane) -> Iterator[tuple[str, str]]:
    """A Node that looks ready for GPU pods (Ready, labelled, nvidia.com/gpu allocatable) and a
    RuntimeClass of its own; no kubelet will ever run the pod."""
    kube = kube_session
    name, runtime_class = f"smoke-{os.urandom(3).hex()}", f"nvidia-{os.urandom(3).hex()}"
    kube.ensure_service_account("default", "default")  # the controller that makes it does not run here
    kube.create_node(name, LABELS)
    status = {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        "capacity": {"nvidia.com/gpu": "2", "pods": "10"},
        "allocatable": {"nvidia.com/gpu": "2", "pods": "10"},
    }
    answer = kube.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                          content_type="application/merge-patch+json")  # fmt: skip
    assert answer.status == 200, answer.message
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class}}
    kube.must("POST", "/apis/node.k8s.io/v1/runtimeclasses", rc | {"handler": "nvidia"})
    yield name, runtime_class
    kube.request("DELETE", f"/apis/node.k8s.io/v1/runtimeclasses/{runtime_class}")
    kube.delete_node(name)


def smoke_pods(kube: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.must(
        "GET", f"/api/v1/namespaces/default/pods?labelSelector={SELECTOR}"
    )["items"]
    return items


def doctor_requests(kube: ControlPlane, since: int) -> list[tuple[str, str, str]]:
    """(verb, resource, name) of what the doctor asked, in order."""
    return [
        (e["verb"], e["objectRef"].get("resource", ""), e["objectRef"].get("name", ""))
        for e in kube.requests("admin")[since:]
        if e.get("userAgent", "").startswith(CLIENT)
    ]


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["--smoke-test", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_no_pod_is_made_for_a_node_that_is_not_there(kube_session, capsys):
    kube = kube_session
    since = len(kube.requests("admin"))
    code, report = run_json(["--node", "no-such-node", "--kubeconfig", str(kube.admin_kubeconfig)], capsys)
    assert code == 1 and report["first_failed_layer"] == 1 and report["pod"] is None
    assert report["checks"][0]["evidence"] == "no node named no-such-node in the cluster"
    assert [c["status"] for c in report["checks"]] == ["FAIL"] + ["SKIP"] * 9
    assert doctor_requests(kube, since) == [
        ("get", "nodes", "no-such-node"),
        ("get", "runtimeclasses", "nvidia"),
    ]


def test_a_pod_no_scheduler_places_fails_at_scheduling_on_timeout_and_is_deleted(
    kube_session, gpu_node, capsys
):
    kube = kube_session
    node, runtime_class = gpu_node
    since = len(kube.requests("admin"))
    args = ["--node", node, "--runtime-class", runtime_class, "--timeout", "2s", "--kubeconfig",
            str(kube.admin_kubeconfig)]  # fmt: skip
    code, report = run_json(args, capsys)
    assert code == 1 and report["first_failed_layer"] == 5
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses == {"node": "PASS", "labels": "PASS", "device plugin": "PASS", "RuntimeClass": "PASS",
                        "scheduling": "FAIL", "container start": "SKIP", "NVML in the pod": "SKIP",
                        "GPUs in the pod": "SKIP", "CUDA in the pod": "SKIP", "workload": "SKIP"}  # fmt: skip
    assert report["checks"][4]["evidence"] == "not scheduled within 2 s and no word from the scheduler"
    pod = report["pod"].removeprefix("default/")
    asked = doctor_requests(kube, since)
    assert asked[:3] == [
        ("get", "nodes", node),
        ("get", "runtimeclasses", runtime_class),
        ("create", "pods", pod),
    ]
    assert ("delete", "pods", pod) in asked
    assert {verb for verb, _, _ in asked} <= {"get", "list", "create", "delete"}  # nothing patched or updated
    assert smoke_pods(kube) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_deletes_the_pod_before_the_doctor_exits(kube_session, gpu_node, signum):
    kube = kube_session
    node, runtime_class = gpu_node
    doctor = subprocess.Popen(
        [sys.executable, "-m", "gfd", "doctor", "--smoke-test", "--node", node, "--runtime-class",
         runtime_class, "--timeout", "60s", "--kubeconfig", str(kube.admin_kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert eventually(lambda: smoke_pods(kube), 30, interval=0.2), "the doctor made no pod"
        [made] = smoke_pods(kube)
        doctor.send_signal(signum)
        out, err = doctor.communicate(timeout=60)
    finally:
        doctor.kill()
    assert doctor.returncode == 128 + signum, err
    assert err == f"gfd doctor: interrupted; pod default/{made['metadata']['name']} deleted\n"
    assert out == "" and smoke_pods(kube) == []
