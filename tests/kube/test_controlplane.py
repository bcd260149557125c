"""The real control plane itself: what the other Kubernetes tests rely on it to do."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from tests.kube.controlplane import ControlPlane


def _claims(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    claims: dict[str, object] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def test_serves_the_pinned_version(kube: ControlPlane) -> None:
    version = kube.must("GET", "/version")
    assert version["gitVersion"].startswith("v1.")
    assert int(version["minor"]) >= 30


def test_pod_bound_token_carries_the_node_claims(kube: ControlPlane, new_node: Callable[..., str]) -> None:
    node = new_node()
    token = kube.pod_token(node)
    k8s = _claims(token)["kubernetes.io"]
    assert isinstance(k8s, dict)
    assert k8s["node"]["name"] == node
    assert k8s["node"]["uid"] == kube.get_node(node)["metadata"]["uid"]
    review = kube.must(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=token,
    )
    user = review["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:gpu-labeller:nfd-lite"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [node]


def test_a_label_key_ending_in_a_newline_is_refused_by_the_server(
    kube: ControlPlane, new_node: Callable[..., str]
) -> None:
    node = new_node()
    answer = kube.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.count\n": "1"}}})
    assert answer.status == 422
    assert "nvidia.com/gpu.count" not in kube.labels(node)
