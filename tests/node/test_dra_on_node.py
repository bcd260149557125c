"""The chart's DRA mode on the real node: a DRA driver (Kubernetes' own test driver under NVIDIA's driver
name, the stand-in of tests/node/dra.py) publishes the node's 8 devices; the release's ResourceClaimTemplate
becomes a claim that the scheduler allocates with admin access to all of them; the kubelet has the driver
prepare it and runs the pod, admitted under Pod Security `restricted` without the nvidia RuntimeClass; the
writer labels the node with the DRA set. Admin access takes nothing from workloads: a pod claiming one of
the same devices the ordinary way is allocated and runs beside it.

What this does not show: that NVML works through NVIDIA's CDI injection of an admin claim (a GPU and
NVIDIA's driver are needed for that); gfd here reads the mock backend, as in test_chart_on_node.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import CHART
from tests.kube.helm import create_namespace, helm
from tests.node.cluster import NodeCluster
from tests.node.dra import DRIVER, StandInDriver
from tests.node.images import BUSYBOX_IMAGE
from tests.node.release import (
    HELM,
    MOCK_PROFILE,
    MOCK_VALUES,
    NFD_PCI_LABEL,
    gfd_oneshot,
    install,
    owned,
    prepare_gpu_node,
    the_pod,
    uninstall_pruning,
    wait_until,
)
from tests.node.workloads import apply, delete, pod, wait_phase

pytestmark = pytest.mark.timeout(600)

RELEASE = "gpu-labeller-dra"
NAMESPACE = "gpu-labeller-dra"
ADMIN_ACCESS = "resource.kubernetes.io/admin-access"
DEVICES = 8
MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
VALUES: dict[str, Any] = {**MOCK_VALUES, "dra": {"enabled": True}}
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"


@pytest.fixture(scope="module")
def dra_release(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("dra-on-node")
    prepare_gpu_node(cluster, runtime_class=False)  # a DRA cluster needs no nvidia RuntimeClass
    with StandInDriver(cluster, DEVICES):
        create_namespace(cluster, NAMESPACE, "restricted")
        refused = helm(HELM, cluster, tmp, "install", RELEASE, str(CHART), "-n", NAMESPACE, values=VALUES)
        assert refused.returncode != 0
        assert f"namespace {NAMESPACE} lacks the label {ADMIN_ACCESS}=true" in refused.stderr
        cluster.kubectl("label", "namespace", NAMESPACE, f"{ADMIN_ACCESS}=true")
        install(cluster, tmp, RELEASE, VALUES, namespace=NAMESPACE)
        yield tmp
        uninstall_pruning(cluster, tmp, RELEASE, namespace=NAMESPACE)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def claim_of(cluster: NodeCluster, pod: dict[str, Any]) -> dict[str, Any]:
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim: dict[str, Any] = cluster.must("GET", f"{CLAIMS}/{status['resourceClaimName']}")
    return claim


def test_the_admin_claim_gets_every_device_and_the_pod_runs_restricted_without_the_runtime_class(
    node_with_image: NodeCluster, dra_release: Path
) -> None:
    cluster = node_with_image
    running = the_pod(cluster, RELEASE, NAMESPACE)
    assert "runtimeClassName" not in running["spec"]
    claim = claim_of(cluster, running)
    (request,) = claim["spec"]["devices"]["requests"]
    asked = request["exactly"]
    assert (asked["deviceClassName"], asked["allocationMode"], asked["adminAccess"]) == (DRIVER, "All", True)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == DEVICES
    assert {(r["driver"], r["pool"], r.get("adminAccess")) for r in results} == {(DRIVER, cluster.node, True)}
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [running["metadata"]["uid"]]
    namespace = cluster.must("GET", f"/api/v1/namespaces/{NAMESPACE}")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_node_is_labelled_with_the_dra_set(node_with_image: NodeCluster, dra_release: Path) -> None:
    cluster = node_with_image
    expected = gfd_oneshot(
        "--backend", "mock", f"--mock-profile={MOCK_PROFILE}", "--label-set=dra",
        f"--machine-type-file={MACHINE_TYPE_FILE}",
    )  # fmt: skip

    def written() -> dict[str, str]:
        return owned(cluster.labels(cluster.node), besides={NFD_PCI_LABEL})

    wait_until(lambda: written() == expected, 60, f"node labels {written()} == {expected}")
    assert "nvidia.com/gpu.replicas" not in written() and "nvidia.com/mps.capable" not in written()


def test_admin_access_leaves_the_devices_to_workloads(
    node_with_image: NodeCluster, dra_release: Path
) -> None:
    cluster = node_with_image
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
        },
    }
    workload = pod(
        "dra-workload", BUSYBOX_IMAGE, ["sleep", "300"],
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        resources={"claims": [{"name": "gpu"}]},
    )  # fmt: skip
    apply(cluster, template, workload)
    try:
        running = wait_phase(cluster, "default", "dra-workload", "Running")
        (status,) = running["status"]["resourceClaimStatuses"]
        claim = cluster.must(
            "GET", f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{status['resourceClaimName']}"
        )
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER and not result.get("adminAccess")
        # gfd's claim still holds every device, the workload's among them.
        admin = claim_of(cluster, the_pod(cluster, RELEASE, NAMESPACE))
        assert result["device"] in {r["device"] for r in admin["status"]["allocation"]["devices"]["results"]}
    finally:
        delete(cluster, "default", "dra-workload")
        delete(cluster, "default", "one-gpu", kind="resourceclaimtemplate")
