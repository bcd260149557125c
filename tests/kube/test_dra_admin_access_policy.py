"""The opt-in DRA admin-access policy (rbac/optional/dra-admin-access-policy.yaml, the chart's
draAdminAccessPolicy) on a real kube-apiserver: a user allowed to create and update namespaces may set every
label but resource.kubernetes.io/admin-access, through any subresource; the allowed groups may. And what it
does not stop: in a namespace an admin has labelled, anyone who may create ResourceClaims gets admin access.

Applied for this module only and removed (and seen gone) after.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import by_kind, documents, render
from tests.kube.controlplane import ApiResponse, ControlPlane
from tests.kube.fixtures import RBAC_DIR, RELEASES, newest_and_oldest
from tests.kube.helm import TOOLS, type_check_warnings
from tests.node.pki import Pair

NAME = "gpu-labeller-dra-admin-access"
POLICY = f"ValidatingAdmissionPolicy '{NAME}'"
FILE = RBAC_DIR / "optional" / "dra-admin-access-policy.yaml"
KEY = "resource.kubernetes.io/admin-access"
EDITOR_ROLE = "test-namespace-editor"


@pytest.fixture(scope="module", params=RELEASES)
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The newest Kubernetes the chart claims (the session's control plane) and the oldest, 1.30."""
    yield from newest_and_oldest(request, tmp_path_factory, rbac=False)


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def apply(kube: ControlPlane, docs: list[dict[str, Any]]) -> None:
    kube.apply_policies(yaml.safe_dump_all(docs))


class Policy:
    """The policy as shipped (or as the chart renders it for other values); each change waits until the
    server enforces it, probed by a dry-run namespace create of a user in no allowed group."""

    def __init__(self, kube: ControlPlane) -> None:
        self.kube = kube
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": EDITOR_ROLE},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
                    "verbs": ["get", "create", "update", "patch"],
                },
                {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["create"]},
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": EDITOR_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EDITOR_ROLE},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                for group in ("developers", "gpu-admins")
            ],
        }
        apply(kube, [role, binding])
        self.developer = kube.client_certificate("dev@example.com", ("developers",))
        self.root = kube.client_certificate("root@example.com", ("system:masters",))

    def probe(self, cert: Pair) -> ApiResponse:
        name = f"probe-{os.urandom(3).hex()}"
        return self.kube.request(
            "POST", "/api/v1/namespaces?dryRun=All", namespace(name, {KEY: "true"}), cert=cert
        )

    def _wait(self, denied: bool, allowed: Pair | None = None) -> None:
        """Until the developer is refused (or not) and ``allowed`` admitted."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            answer = self.probe(self.developer)
            if (
                (answer.status == 403 and POLICY in answer.message) == denied
                and answer.status in (201, 403)
                and (allowed is None or self.probe(allowed).status == 201)
            ):
                return
            time.sleep(0.25)
        raise AssertionError(f"the policy was not {'enforced' if denied else 'removed'} within 60 s")

    def set(self, docs: list[dict[str, Any]], allowed: Pair) -> None:
        """``docs`` enforced: the developer refused, ``allowed`` (a member of an allowed group) admitted."""
        apply(self.kube, docs)
        self._wait(denied=True, allowed=allowed)

    def remove(self) -> None:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            self.kube.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{NAME}")
        self._wait(denied=False)
        self.kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{EDITOR_ROLE}")
        self.kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{EDITOR_ROLE}")


def shipped() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(FILE.read_text()) if d]


@pytest.fixture(scope="module")
def policy(kube: ControlPlane) -> Iterator[Policy]:
    applied = Policy(kube)
    try:
        applied.set(shipped(), allowed=applied.root)
        yield applied
    finally:
        applied.remove()


@pytest.fixture
def new_namespace(kube: ControlPlane) -> Iterator[Callable[..., str]]:
    """``new_namespace(labels)``: a namespace the admin creates; all are deleted after the test."""
    made: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"ns-{os.urandom(4).hex()}"
        kube.must("POST", "/api/v1/namespaces", namespace(name, labels))
        made.append(name)
        return name

    yield make
    for name in made:
        kube.request("DELETE", f"/api/v1/namespaces/{name}")


def refused(answer: ApiResponse, user: str) -> bool:
    return (
        answer.status == 403
        and POLICY in answer.message
        and f"may add or change the namespace label {KEY}" in answer.message
        and answer.message.endswith(f"not {user}")
    )


def patch_labels(
    kube: ControlPlane, name: str, labels: Mapping[str, str | None], cert: Pair, subresource: str = ""
) -> ApiResponse:
    path = f"/api/v1/namespaces/{name}" + (f"/{subresource}" if subresource else "")
    return kube.request(
        "PATCH",
        path,
        {"metadata": {"labels": labels}},
        cert=cert,
        content_type="application/merge-patch+json",
    )


def test_the_policy_type_checks_without_warnings(kube: ControlPlane, policy: Policy) -> None:
    assert type_check_warnings(kube, NAME, timeout=60) == []


def test_creating_a_namespace_with_the_label_is_refused_without_it_admitted(
    kube: ControlPlane, policy: Policy
) -> None:
    name = f"ns-{os.urandom(4).hex()}"
    try:
        answer = kube.request(
            "POST", "/api/v1/namespaces", namespace(name, {KEY: "true"}), cert=policy.developer
        )
        assert refused(answer, "dev@example.com"), answer.message
        answer = kube.request(
            "POST", "/api/v1/namespaces", namespace(name, {"team": "ml"}), cert=policy.developer
        )
        assert answer.status == 201, answer.message
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.mark.parametrize("subresource", ["", "status"])
def test_adding_or_changing_the_label_is_refused_removing_it_and_other_labels_admitted(
    kube: ControlPlane, policy: Policy, new_namespace: Callable[..., str], subresource: str
) -> None:
    plain, off, on = new_namespace(), new_namespace({KEY: "false"}), new_namespace({KEY: "true"})
    dev = policy.developer
    assert refused(patch_labels(kube, plain, {KEY: "true"}, dev, subresource), "dev@example.com")
    assert refused(patch_labels(kube, off, {KEY: "true"}, dev, subresource), "dev@example.com")
    assert KEY not in kube.must("GET", f"/api/v1/namespaces/{plain}")["metadata"]["labels"]
    for name, labels in ((on, {"team": "ml"}), (plain, {"team": "ml"}), (on, {KEY: None})):
        answer = patch_labels(kube, name, labels, dev, subresource)
        assert answer.status == 200, (labels, answer.message)
    assert KEY not in kube.must("GET", f"/api/v1/namespaces/{on}")["metadata"]["labels"]


def test_nor_through_the_finalize_subresource(
    kube: ControlPlane, policy: Policy, new_namespace: Callable[..., str]
) -> None:
    name = new_namespace()
    stored = kube.must("GET", f"/api/v1/namespaces/{name}")
    stored["metadata"]["labels"][KEY] = "true"
    answer = kube.request("PUT", f"/api/v1/namespaces/{name}/finalize", stored, cert=policy.developer)
    assert refused(answer, "dev@example.com"), answer.message


def test_a_member_of_an_allowed_group_may_add_it(
    kube: ControlPlane, policy: Policy, new_namespace: Callable[..., str], tmp_path: Path
) -> None:
    """system:masters by default; the chart's allowedGroups replaces the list (rendered by the real helm)."""
    name = new_namespace()
    admin = patch_labels(kube, name, {KEY: "true"}, policy.root)
    assert admin.status == 200, admin.message
    other = new_namespace()
    gpu_admin = kube.client_certificate("gpu-admin@example.com", ("gpu-admins",))
    assert refused(patch_labels(kube, other, {KEY: "true"}, gpu_admin), "gpu-admin@example.com")
    values = {"draAdminAccessPolicy": {"enabled": True, "allowedGroups": ["gpu-admins"]}}
    rendered = documents(render(TOOLS, "helm4", values, tmp_path))
    objects = [
        d
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for d in by_kind(rendered, kind)
        if d["metadata"]["name"] == NAME
    ]
    assert len(objects) == 2
    policy.set(objects, allowed=gpu_admin)
    try:
        answer = patch_labels(kube, other, {KEY: "true"}, gpu_admin)
        assert answer.status == 200, answer.message
        # The list replaces the default: system:masters is no longer in it.
        assert refused(patch_labels(kube, new_namespace(), {KEY: "true"}, policy.root), "root@example.com")
    finally:
        policy.set(shipped(), allowed=policy.root)


def admin_claim(name: str) -> dict[str, Any]:
    request = {
        "name": "gpus",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def test_what_it_does_not_stop_claims_in_a_namespace_an_admin_labelled(
    kube: ControlPlane, policy: Policy, new_namespace: Callable[..., str]
) -> None:
    """The label is the whole grant: once an allowed admin has set it, anyone who may create ResourceClaims
    (or pods with claim templates) there gets admin access to every device of a class. Without it Kubernetes
    refuses the same claim."""
    if kube.request("GET", "/apis/resource.k8s.io/v1").status != 200:
        pytest.skip("no resource.k8s.io/v1 on this Kubernetes (DRA is GA from 1.34)")
    labelled, plain = new_namespace({KEY: "true"}), new_namespace()
    admitted = kube.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{labelled}/resourceclaims",
        admin_claim("all"),
        cert=policy.developer,
    )
    assert admitted.status == 201, admitted.message
    refused_claim = kube.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{plain}/resourceclaims",
        admin_claim("all"),
        cert=policy.developer,
    )
    assert refused_claim.status == 422 and f"requires the `{KEY}: true` label" in refused_claim.message, (
        refused_claim.message
    )
