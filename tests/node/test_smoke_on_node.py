"""`gfd doctor --smoke-test` on the real node, run as an admin runs it (the `gfd` command, the admin's
kubeconfig): each broken layer produced for real and named, with no pod left behind. The stack is the
talk's, bottom up: NVIDIA's mock NVML as the driver (a DGX A100, 8 GPUs), the toolkit stand-in as the
`nvidia` runtime handler, our chart labelling the node, NVIDIA's device plugin, and the smoke test's pod.

The chart's image is tagged in the node's containerd under the name the doctor uses by default
(ghcr.io/gpu-labeller/gpu-labeller:<version>), as a node running the chart has it.

The healthy report and one failure are the samples in docs/doctor.md; after a deliberate change to the
output, regenerate them and review the diff:
    UPDATE_DOCS=1 flock /work/wt/heavy.lock .venv/bin/pytest tests/node/test_smoke_on_node.py
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from gfd.doctor.smoke.pod import DEFAULT_PROBE_IMAGE
from tests.kube.controlplane import ROOT
from tests.node.cluster import NodeCluster
from tests.node.device_plugin import allocatable_gpus, device_plugin
from tests.node.images import BUSYBOX_IMAGE, PROJECT_IMAGE
from tests.node.release import IMAGE, install, prepare_gpu_node, uninstall_pruning, wait_until
from tests.node.workloads import apply, delete, pod, wait_phase

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-smoke"
GPUS = 8
SELECTOR = "app.kubernetes.io/name=gfd-smoke-test"
DOC = ROOT / "docs" / "doctor.md"
GFD = str(ROOT / ".venv" / "bin" / "gfd")


@pytest.fixture(scope="module")
def node(gpu_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    cluster = gpu_node
    tmp = tmp_path_factory.mktemp("smoke")
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})
    tagged = cluster.ctr("images", "tag", "--force", PROJECT_IMAGE, DEFAULT_PROBE_IMAGE)
    assert tagged.returncode == 0, tagged.stderr
    prepare_gpu_node(cluster)
    install(cluster, tmp, RELEASE, {"image": IMAGE})
    apply(cluster, device_plugin())
    wait_until(lambda: allocatable_gpus(cluster) == GPUS, 90, f"{GPUS} GPUs advertised")
    wait_until(lambda: "nvidia.com/gpu.product" in cluster.labels(cluster.node), 60, "labels written")
    yield cluster
    delete(cluster, "kube-system", "nvidia-device-plugin", kind="daemonset")
    uninstall_pruning(cluster, tmp, RELEASE)
    wait_until(lambda: allocatable_gpus(cluster) == 0, 60, "no GPUs allocatable once the plugin is gone")
    cluster.ctr("images", "rm", DEFAULT_PROBE_IMAGE)


def smoke_pods(cluster: NodeCluster) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.must("GET", f"/api/v1/pods?labelSelector={SELECTOR}")["items"]
    return found


def command(cluster: NodeCluster, *args: str) -> list[str]:
    kubeconfig = str(cluster.admin_kubeconfig)
    return [GFD, "doctor", "--smoke-test", "--node", cluster.node, "--kubeconfig", kubeconfig, *args]


def environment(cluster: NodeCluster) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(cluster.workdir)}


def smoke(cluster: NodeCluster, *args: str) -> tuple[int, dict[str, Any]]:
    """The doctor's JSON report, after checking it left no pod behind."""
    done = subprocess.run(
        command(cluster, "--json", *args),
        env=environment(cluster),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert smoke_pods(cluster) == [], "the smoke test left its pod behind"
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def first_failure(report: dict[str, Any]) -> dict[str, Any]:
    assert report["result"] == "FAIL", json.dumps(report, indent=1)
    failed: dict[str, Any] = next(c for c in report["checks"] if c["status"] == "FAIL")
    assert failed["layer"] == report["first_failed_layer"]
    assert all(c["status"] == "SKIP" for c in report["checks"] if c["layer"] > failed["layer"])
    return failed


# ---- the samples in docs/doctor.md ----


def transcript(cluster: NodeCluster, *args: str) -> tuple[int, str]:
    """The plain report as a piped command prints it, with the command line shown."""
    done = subprocess.run(
        command(cluster, *args), env=environment(cluster), capture_output=True, text=True, timeout=300
    )
    assert smoke_pods(cluster) == [] and done.stderr == ""
    shown = " ".join(["gfd doctor --smoke-test --node", cluster.node, *args, "| cat"])
    return done.returncode, f"$ {shown}\n{done.stdout}"


def masked(text: str) -> str:
    """What differs between two runs on the same node: the pod's name and which GPU it was given."""
    text = re.sub(r"gfd-smoke-test-[0-9a-f]{6}", "gfd-smoke-test-XXXXXX", text)
    text = re.sub(r"GPU-[0-9a-f]{8}-[0-9a-f-]{27}", "GPU-X", text)
    return re.sub(r"/dev/nvidia\d+", "/dev/nvidiaN", text)


def check_sample(name: str, out: str) -> None:
    marker = f"<!-- {name}: made by tests/node/test_smoke_on_node.py -->"
    doc = DOC.read_text()
    match = re.search(re.escape(marker) + r"\n```\n(.*?)```\n", doc, re.S)
    assert match, f"docs/doctor.md: no code block after {marker}"
    if os.environ.get("UPDATE_DOCS"):
        DOC.write_text(doc[: match.start(1)] + out + doc[match.end(1) :])
        return
    assert masked(match.group(1)) == masked(out), "docs/doctor.md is stale: regenerate it (see this file)"


# ---- the cases, healthy first ----


def test_a_healthy_node_passes_every_layer(node: NodeCluster) -> None:
    code, out = transcript(node)
    check_sample("smoke test healthy sample", out)
    assert code == 0, out
    code, report = smoke(node)
    assert code == 0 and report["result"] == "PASS"
    statuses = [c["status"] for c in report["checks"]]
    assert statuses == ["PASS"] * 9 + ["SKIP"], json.dumps(report, indent=1)
    gpus = report["checks"][7]["evidence"]
    assert gpus.startswith("1 GPU, the one given: Mock NVIDIA A100-SXM4-40GB (GPU-")
    assert "as labelled (nvidia.com/gpu.product=Mock-NVIDIA-A100-SXM4-40GB, nvidia.com/gpu.count=8)" in gpus
    nvml = report["checks"][6]["evidence"]
    assert re.fullmatch(
        r"NVML started in the pod \(driver 550\.54\.15\); device nodes /dev/nvidia-uvm, "
        r"/dev/nvidia[0-7], /dev/nvidiactl",
        nvml,
    ), nvml


def test_a_cuda_release_newer_than_the_driver_fails_at_cuda(node: NodeCluster) -> None:
    code, report = smoke(node, "--cuda", "13.0")
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "CUDA in the pod"
    assert failed["evidence"].startswith("in the pod: a CUDA 13.0 image will not run: it needs driver >= 580")


def test_an_image_that_exits_non_zero_fails_at_the_workload_with_its_log(node: NodeCluster) -> None:
    code, report = smoke(
        node, "--image", BUSYBOX_IMAGE, "--", "sh", "-c", "echo step 1; echo step 2 failed; exit 3"
    )
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "workload"
    assert failed["evidence"] == f"{BUSYBOX_IMAGE} exited 3 (Error); its log: step 1 | step 2 failed"
    assert [c["status"] for c in report["checks"][:9]] == ["PASS"] * 9  # the probe ran first, in the same pod


def test_a_workload_still_running_at_the_timeout_is_stopped_and_deleted(node: NodeCluster) -> None:
    code, report = smoke(
        node, "--image", BUSYBOX_IMAGE, "--timeout", "15s", "--", "sh", "-c", "echo busy; sleep 600"
    )
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "workload"
    assert failed["evidence"] == f"{BUSYBOX_IMAGE} still running after 15 s; its log: busy"


def test_ctrl_c_deletes_a_running_pod_before_the_doctor_exits(node: NodeCluster) -> None:
    doctor = subprocess.Popen(
        command(node, "--image", BUSYBOX_IMAGE, "--", "sleep", "600"),
        env=environment(node),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: any(p["status"].get("phase") == "Running" for p in smoke_pods(node)), 60, "pod running"
        )
        [running] = smoke_pods(node)
        doctor.send_signal(signal.SIGINT)
        out, err = doctor.communicate(timeout=60)
    finally:
        doctor.kill()
    assert doctor.returncode == 130
    assert (
        err == f"gfd doctor: interrupted; pod default/{running['metadata']['name']} deleted\n" and out == ""
    )
    assert smoke_pods(node) == []


def test_a_runtime_handler_that_injects_nothing_fails_at_nvml(node: NodeCluster) -> None:
    """A RuntimeClass whose handler is plain runc: the device plugin gives the GPU, nothing injects NVML."""
    apply(
        node,
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "nvidia-runc"},
            "handler": "runc",
        },
    )
    try:
        code, out = transcript(node, "--runtime-class", "nvidia-runc")
        check_sample("smoke test runc sample", out)
        code, report = smoke(node, "--runtime-class", "nvidia-runc")
    finally:
        delete(node, "", "nvidia-runc", kind="runtimeclass")
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "NVML in the pod"
    assert failed["evidence"].startswith(
        "libnvidia-ml.so.1 is not in the pod (NVML: Library Not Found) although it"
    )
    assert failed["evidence"].endswith("the runtime (handler 'runc') did not inject the driver's libraries")


def test_a_handler_containerd_does_not_know_fails_at_container_start(node: NodeCluster) -> None:
    apply(
        node,
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "nvidia-cdi"},
            "handler": "nvidia-cdi",
        },
    )
    try:
        code, report = smoke(node, "--runtime-class", "nvidia-cdi")
    finally:
        delete(node, "", "nvidia-cdi", kind="runtimeclass")
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "container start"
    assert failed["evidence"].startswith(
        "the node's container runtime has no handler 'nvidia-cdi' (RuntimeClass nvidia-cdi): "
    ), failed["evidence"]


def test_a_taint_the_pod_does_not_tolerate_fails_at_scheduling(node: NodeCluster) -> None:
    node.kubectl("taint", "nodes", node.node, "smoke-test=blocked:NoSchedule")
    try:
        code, report = smoke(node)
        tolerated, _ = smoke(node, "--tolerate", "smoke-test")
    finally:
        node.kubectl("taint", "nodes", node.node, "smoke-test-")
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "scheduling"
    assert failed["evidence"].startswith(
        f"{node.node} has taint smoke-test=blocked:NoSchedule, which the pod"
    )
    assert (
        "the scheduler said: 0/1 nodes are available: 1 node(s) had untolerated taint(s)"
        in failed["evidence"]
    )
    assert tolerated == 0


def test_all_gpus_taken_fails_at_scheduling_and_names_the_pod_holding_them(node: NodeCluster) -> None:
    hog = pod("gpu-hog", BUSYBOX_IMAGE, ["sleep", "600"], resources={"limits": {"nvidia.com/gpu": GPUS}})
    apply(node, hog)
    try:
        wait_phase(node, "default", "gpu-hog", "Running")
        code, report = smoke(node)
    finally:
        delete(node, "default", "gpu-hog")
        wait_until(
            lambda: node.request("GET", "/api/v1/namespaces/default/pods/gpu-hog").status == 404,
            60,
            "the hog gone",
        )
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "scheduling"
    assert failed["evidence"].startswith(f"every GPU on {node.node} is taken, by default/gpu-hog ({GPUS}); ")
    assert "Insufficient nvidia.com/gpu" in failed["evidence"]


def test_no_runtime_class_fails_at_the_runtime_class_and_makes_no_pod(node: NodeCluster) -> None:
    node.kubectl("delete", "runtimeclass", "nvidia")
    try:
        code, report = smoke(node)
        # What the evidence says: the API server refuses a pod asking for it.
        asking = pod("asks-for-nvidia", BUSYBOX_IMAGE, ["true"], runtimeClassName="nvidia")
        refused = node.request("POST", "/api/v1/namespaces/default/pods", asking)
    finally:
        prepare_gpu_node(node)
    assert refused.status == 403 and 'RuntimeClass "nvidia" not found' in refused.message, refused.message
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "RuntimeClass" and report["pod"] is None
    assert failed["evidence"] == "no RuntimeClass nvidia: the API server refuses pods that ask for it"


def test_no_device_plugin_fails_at_the_device_plugin(node: NodeCluster) -> None:
    delete(node, "kube-system", "nvidia-device-plugin", kind="daemonset")
    wait_until(lambda: allocatable_gpus(node) == 0, 90, "the kubelet withdraws the GPUs")
    code, report = smoke(node)
    failed = first_failure(report)
    assert code == 1 and failed["name"] == "device plugin" and report["pod"] is None
    # The kubelet keeps a gone plugin's capacity for a while; allocatable drops at once.
    assert failed["evidence"] == (
        f"nvidia.com/gpu capacity {GPUS} but none allocatable: the device plugin has gone (the kubelet keeps "
        "the capacity for some minutes after) or reports every GPU unhealthy"
    )
