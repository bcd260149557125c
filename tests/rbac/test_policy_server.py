"""RBAC and the admission policy together, through the fake API server and the official client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.server import FakeApiServer
from tests.rbac.manifests import NAME, NAMESPACE

MERGE = "application/merge-patch+json"
DENIED = (
    "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding 'gpu-labeller-nfd-lite' denied request: "
)


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node("gpu-1")
    apiserver.add_node("gpu-2")
    return apiserver


@contextmanager
def core(api: FakeApiServer, token: str) -> Iterator[Any]:
    with api.api_client(token) as api_client:
        yield client.CoreV1Api(api_client)


@pytest.fixture
def writer(cluster: FakeApiServer) -> Iterator[Any]:
    with core(cluster, cluster.token_for_service_account(NAMESPACE, NAME, node_name="gpu-1")) as v1:
        yield v1


def refusal(call: Any) -> str:
    with pytest.raises(client.ApiException) as err:
        call()
    body = json.loads(err.value.body or "{}")
    assert (err.value.status, body["reason"]) == (403, "Forbidden")
    return str(body["message"])


def write(rv: str, labels: dict[str, Any], owned: str) -> dict[str, Any]:
    """The writer's patch, shaped as the contract fixes it."""
    return {
        "metadata": {
            "resourceVersion": rv,
            "labels": labels,
            "annotations": {"gpu-labeller.io/owned-labels": owned},
        }
    }


def test_the_writers_own_change_is_admitted(cluster: FakeApiServer, writer: Any) -> None:
    rv = writer.read_node("gpu-1").metadata.resource_version
    writer.patch_node(
        "gpu-1", write(rv, {"nvidia.com/gpu.present": "true"}, "nvidia.com/gpu.present"), _content_type=MERGE
    )
    assert cluster.labels("gpu-1")["nvidia.com/gpu.present"] == "true"


def test_another_nodes_labels_are_refused(cluster: FakeApiServer, writer: Any) -> None:
    rv = writer.read_node("gpu-2").metadata.resource_version
    message = refusal(
        lambda: writer.patch_node(
            "gpu-2", write(rv, {"nvidia.com/gpu.present": "true"}, ""), _content_type=MERGE
        )
    )
    assert (
        message
        == f'nodes "gpu-2" is forbidden: {DENIED}nfd-lite may only change its own Node gpu-1, not gpu-2'
    )
    assert "nvidia.com/gpu.present" not in cluster.labels("gpu-2")


def test_a_kubernetes_io_label_is_refused(cluster: FakeApiServer, writer: Any) -> None:
    message = refusal(
        lambda: writer.patch_node("gpu-1", {"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}})
    )
    assert message.endswith("not: node-role.kubernetes.io/gpu")
    assert "node-role.kubernetes.io/gpu" not in cluster.labels("gpu-1")


def test_a_taint_is_refused(cluster: FakeApiServer, writer: Any) -> None:
    taint = {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}
    assert refusal(lambda: writer.patch_node("gpu-1", taint)).endswith(
        "nfd-lite may not add, change or remove taints"
    )
    assert "taints" not in cluster.get_node("gpu-1")["spec"]


def test_a_token_without_the_node_claim_is_refused(cluster: FakeApiServer) -> None:
    with core(cluster, cluster.token_for_service_account(NAMESPACE, NAME, node_name=None)) as v1:
        message = refusal(lambda: v1.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/a": "1"}}}))
    assert "carries no authentication.kubernetes.io/node-name claim" in message


def test_server_side_apply_of_own_labels_is_admitted(cluster: FakeApiServer, writer: Any) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.count": "8"}},
    }
    writer.patch_node(
        "gpu-1", body, field_manager="nfd-lite", force=True, _content_type="application/apply-patch+yaml"
    )
    assert cluster.labels("gpu-1")["nvidia.com/gpu.count"] == "8"


def test_rbac_refuses_before_admission_for_verbs_not_granted(writer: Any) -> None:
    message = refusal(
        lambda: writer.patch_node_status("gpu-1", {"metadata": {"labels": {"nvidia.com/a": "1"}}})
    )
    assert 'cannot patch resource "nodes/status"' in message


def test_the_admin_is_not_held_to_the_writers_policy(cluster: FakeApiServer) -> None:
    with core(cluster, cluster.admin_token()) as v1:
        v1.patch_node("gpu-2", {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}})
    assert cluster.get_node("gpu-2")["spec"]["taints"][0]["key"] == "maintenance"
