"""The opt-in label guard (rbac/optional/label-guard.yaml, the chart's guardLabels) on a real kube-apiserver
with the Node authorizer and NodeRestriction, as clusters run them: a kubelet, by its own client
certificate (system:node:NAME in system:nodes), may set nvidia.com/ labels on its Node; the guard refuses
that for the label families gfd owns, and lets the writer's pod-bound token and the admin groups through.

The guard binds every identity, so it is applied for this module only and removed (and seen gone) after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.kube.controlplane import ROOT, ApiResponse, ControlPlane
from tests.kube.fixtures import RBAC_DIR, RELEASES, newest_and_oldest
from tests.kube.helm import type_check_warnings
from tests.kube.writer import ThreadWriter, eventually
from tests.node.pki import Pair

NAME = "gpu-labeller-label-guard"
POLICY = f"ValidatingAdmissionPolicy '{NAME}'"
GUARD_FILE = RBAC_DIR / "optional" / "label-guard.yaml"
PRODUCT = "nvidia.com/gpu.product"
GPU_LABELS = {PRODUCT: "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.present": "true"}
AUDIT_KEY = "validation.policy.admission.k8s.io/validation_failure"


def kubelet_of(kube: ControlPlane, node: str) -> Pair:
    return kube.client_certificate(f"system:node:{node}", ("system:nodes",))


class Guard:
    """The guard as shipped, its binding's validationActions set to what a test needs; each change waits
    until the server enforces it (it loads policies asynchronously)."""

    PROBE = "guard-probe"

    def __init__(self, kube: ControlPlane) -> None:
        self.kube = kube
        self.actions: list[str] | None = None
        if kube.request("GET", f"/api/v1/nodes/{self.PROBE}").status == 404:
            kube.create_node(self.PROBE, {PRODUCT: "probe"})
        self.kubelet = kubelet_of(kube, self.PROBE)

    def probe(self) -> ApiResponse:
        """A kubelet's dry-run change of a guarded label of its own Node (never stored)."""
        return self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.PROBE}?dryRun=All",
            {"metadata": {"labels": {PRODUCT: f"probe-{os.urandom(2).hex()}"}}},
            cert=self.kubelet,
            content_type="application/merge-patch+json",
        )

    def _wait(self, enforced: Callable[[ApiResponse], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if enforced(self.probe()):
                return
            time.sleep(0.25)
        answer = self.probe()
        raise AssertionError(f"the guard was not {what} within 60 s: {answer.status} {answer.message}")

    def set(self, actions: list[str]) -> None:
        if actions == self.actions:
            return
        docs = [d for d in yaml.safe_load_all(GUARD_FILE.read_text()) if d]
        for doc in docs:
            if doc["kind"] == "ValidatingAdmissionPolicyBinding":
                doc["spec"]["validationActions"] = actions
        self.kube.apply_policies(yaml.safe_dump_all(docs))
        if "Deny" in actions:
            self._wait(lambda a: a.status == 403 and POLICY in a.message, "denying")
        else:
            self._wait(lambda a: a.status == 200 and any(NAME in w for w in a.warnings), "warning")
        self.actions = actions

    def remove(self) -> None:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            self.kube.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{NAME}")
        self._wait(lambda a: a.status == 200 and not a.warnings, "removed")
        self.actions = None


@pytest.fixture(scope="module", params=RELEASES)
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The newest Kubernetes the chart claims (the session's control plane) and the oldest, 1.30, whose CEL
    environment is older: a policy that does not compile there refuses every write it matches."""
    yield from newest_and_oldest(request, tmp_path_factory, rbac=True)


@pytest.fixture(scope="module")
def guard(kube: ControlPlane) -> Iterator[Guard]:
    """The guard applied for this module; removed afterwards, so the session's other tests never see it."""
    applied = Guard(kube)
    try:
        yield applied
    finally:
        applied.remove()


@pytest.fixture
def deny(guard: Guard) -> Guard:
    guard.set(["Deny"])
    return guard


@pytest.fixture
def gpu_node(new_node: Callable[..., str]) -> str:
    """A Node with gfd's labels on it (set by the admin here) and the usual kubelet label."""
    return new_node({**GPU_LABELS, "kubernetes.io/hostname": "x"})


def refused(answer: ApiResponse, words: str) -> bool:
    return answer.status == 403 and POLICY in answer.message and words in answer.message


def labels(values: Mapping[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"labels": values}}


def test_the_guard_type_checks_without_warnings(kube: ControlPlane, deny: Guard) -> None:
    assert type_check_warnings(kube, NAME, timeout=60) == []


@pytest.mark.parametrize(
    "change",
    [
        {PRODUCT: "NVIDIA-GeForce-RTX-4090"},  # changed
        {"nvidia.com/gpu.count": None},  # removed
        {"nvidia.com/gpu.memory": "81559"},  # added
        {"nvidia.com/mig-1g.10gb.count": "7"},
        {"nvidia.com/cuda.driver-version.major": "999"},
    ],
)
def test_a_kubelet_may_not_change_the_gpu_labels_gfd_owns(
    kube: ControlPlane, deny: Guard, gpu_node: str, change: dict[str, str | None]
) -> None:
    before = kube.labels(gpu_node)
    answer = kube.patch_node(gpu_node, labels(change), cert=kubelet_of(kube, gpu_node))
    (key,) = change
    assert refused(answer, f"system:node:{gpu_node} may not change: {key}"), answer.message
    assert kube.labels(gpu_node) == before


def test_nor_through_the_status_subresource(kube: ControlPlane, deny: Guard, gpu_node: str) -> None:
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{gpu_node}/status",
        labels({PRODUCT: "forged"}),
        cert=kubelet_of(kube, gpu_node),
        content_type="application/merge-patch+json",
    )
    assert refused(answer, f"may not change: {PRODUCT}"), answer.message
    assert kube.labels(gpu_node)[PRODUCT] == GPU_LABELS[PRODUCT]


@pytest.mark.parametrize(
    "change",
    [
        {"nvidia.com/gpu.present": "false"},  # the GPU Operator's too
        {
            "nvidia.com/gpu.clique": "61248eac-4785-4fbf-9cbd-231635e37e9d.20663"
        },  # the compute-domain plugin's
        {"example.com/rack": "r12"},
        {"kubernetes.io/hostname": "y"},
    ],
)
def test_a_kubelet_still_changes_gpu_present_gpu_clique_and_other_labels(
    kube: ControlPlane, deny: Guard, gpu_node: str, change: dict[str, str]
) -> None:
    answer = kube.patch_node(gpu_node, labels(change), cert=kubelet_of(kube, gpu_node))
    assert answer.status == 200, answer.message
    assert change.items() <= kube.labels(gpu_node).items()


def test_a_kubelet_may_not_change_the_writers_ownership_record(
    kube: ControlPlane, deny: Guard, gpu_node: str
) -> None:
    patch = {"metadata": {"annotations": {OWNED_ANNOTATION: "kubernetes.io/hostname"}}}
    answer = kube.patch_node(gpu_node, patch, cert=kubelet_of(kube, gpu_node))
    assert refused(answer, "gpu-labeller.io/owned-labels"), answer.message


def test_a_kubelet_registering_its_node_with_gpu_labels_is_refused(kube: ControlPlane, deny: Guard) -> None:
    """NodeRestriction lets a kubelet delete its own Node and register it again with any nvidia.com/ label;
    the guard matches CREATE. Its usual registration is admitted."""
    name = f"gpu-{os.urandom(4).hex()}"
    kubelet = kubelet_of(kube, name)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }
    try:
        forged = json.loads(json.dumps(node))
        forged["metadata"]["labels"][PRODUCT] = "forged"
        answer = kube.request("POST", "/api/v1/nodes", forged, cert=kubelet)
        assert refused(answer, f"may not change: {PRODUCT}"), answer.message
        answer = kube.request("POST", "/api/v1/nodes", node, cert=kubelet)
        assert answer.status == 201, answer.message
    finally:
        kube.delete_node(name)


def test_a_controller_with_a_cluster_wide_grant_is_refused(
    kube: ControlPlane, deny: Guard, gpu_node: str
) -> None:
    """A service account allowed to patch every Node (here: bound to the writer's own ClusterRole)."""
    token = kube.pod_token(gpu_node, namespace="gpu-ops", account="node-labeller", bind_pod=False)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"node-labeller-{gpu_node}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "gpu-labeller-nfd-lite",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "node-labeller", "namespace": "gpu-ops"}],
    }
    kube.must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    try:
        answer = kube.patch_node(gpu_node, labels({PRODUCT: "forged"}), token=token)
        assert refused(answer, f"system:serviceaccount:gpu-ops:node-labeller may not change: {PRODUCT}"), (
            answer.message
        )
        other = kube.patch_node(gpu_node, labels({"example.com/pool": "a"}), token=token)
        assert other.status == 200, other.message
    finally:
        kube.request(
            "DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/node-labeller-{gpu_node}"
        )


def test_an_admin_group_member_may_change_them(kube: ControlPlane, deny: Guard, gpu_node: str) -> None:
    """Membership of an admin group (system:masters by default) is what counts, not the name."""
    oncall = kube.client_certificate("oncall@example.com", ("system:masters",))
    answer = kube.patch_node(
        gpu_node, labels({PRODUCT: "fixed-by-hand", "nvidia.com/gpu.count": None}), cert=oncall
    )
    assert answer.status == 200, answer.message
    record = kube.patch_node(
        gpu_node, {"metadata": {"annotations": {OWNED_ANNOTATION: ""}}}
    )  # the admin token
    assert record.status == 200, record.message
    assert kube.labels(gpu_node)[PRODUCT] == "fixed-by-hand"


def gfd_output() -> str:
    """What gfd writes for the bundled H100 machine."""
    done = subprocess.run(
        [sys.executable, "-m", "gfd", "--oneshot", "--backend", "mock", "--mock-profile",
         str(ROOT / "profiles" / "h100.yaml"), "-o", "-"],
        capture_output=True, text=True, timeout=120, check=True, cwd=ROOT,
    )  # fmt: skip
    return done.stdout


def test_the_writer_still_writes_every_label_gfd_gives_it(
    kube: ControlPlane, deny: Guard, new_node: Callable[..., str], tmp_path: Path
) -> None:
    """nfd-lite with its pod-bound token (its own policy enforced too) labels a Node from gfd's file, changes
    a label when the file does, and removes them all when the file goes."""
    node = new_node({"kubernetes.io/hostname": "x"})
    text = gfd_output()
    expected = {
        k: v for k, _, v in (line.partition("=") for line in text.splitlines() if line[:1] not in ("", "#"))
    }
    assert PRODUCT in expected and len(expected) > 20

    def ours() -> dict[str, str]:
        return {k: v for k, v in kube.labels(node).items() if k.startswith("nvidia.com/")}

    with ThreadWriter(kube, tmp_path, node) as w:
        w.write(text)
        assert eventually(lambda: ours() == expected, timeout=60), ours()
        w.write(text.replace("nvidia.com/gpu.count=8", "nvidia.com/gpu.count=7"))
        assert eventually(lambda: ours().get("nvidia.com/gpu.count") == "7", timeout=60)
        (w.dir / "gfd").unlink()
        assert eventually(lambda: ours() == {}, timeout=60), ours()


def test_in_warn_mode_a_kubelets_change_is_admitted_with_a_warning_and_an_audit_annotation(
    kube: ControlPlane, guard: Guard, gpu_node: str
) -> None:
    """[Warn, Audit], the chart's default: NodeRestriction alone admits the kubelet's change; the guard says
    so in a Warning header and in the audit event of the request."""
    guard.set(["Warn", "Audit"])
    answer = kube.patch_node(gpu_node, labels({PRODUCT: "forged"}), cert=kubelet_of(kube, gpu_node))
    assert answer.status == 200, answer.message
    assert kube.labels(gpu_node)[PRODUCT] == "forged"
    (warning,) = [w for w in answer.warnings if NAME in w]
    assert f"Validation failed for {POLICY} with binding '{NAME}'" in warning
    assert f"system:node:{gpu_node} may not change: {PRODUCT}" in warning
    events = [
        e
        for e in kube.requests(f"system:node:{gpu_node}")
        if e["verb"] == "patch" and e["requestURI"] == f"/api/v1/nodes/{gpu_node}"
    ]
    (failure,) = json.loads(events[-1]["annotations"][AUDIT_KEY])
    assert failure["policy"] == failure["binding"] == NAME
    assert failure["validationActions"] == ["Warn", "Audit"]
    assert f"may not change: {PRODUCT}" in failure["message"]
    # Changes it does not guard carry no warning.
    quiet = kube.patch_node(gpu_node, labels({"example.com/rack": "r1"}), cert=kubelet_of(kube, gpu_node))
    assert quiet.status == 200 and not [w for w in quiet.warnings if NAME in w], quiet.warnings
