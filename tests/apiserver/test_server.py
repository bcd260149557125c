"""The fake API server answers the official kubernetes client as a real API server would."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from kubernetes import client, config

from tests.apiserver.server import FakeApiServer

SA = "system:serviceaccount:gpu-labeller:nfd-lite"


def status_of(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body or "{}")
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def merge(labels: dict[str, str | None], rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta}


def test_get_returns_the_node_with_kubelet_labels(writer: Any) -> None:
    node = writer.read_node("gpu-1")
    assert node.metadata.name == "gpu-1"
    assert node.metadata.labels["kubernetes.io/hostname"] == "gpu-1"
    assert node.status.allocatable["pods"] == "110"


def test_get_of_a_missing_node_is_404_not_found(admin: Any) -> None:
    with pytest.raises(client.ApiException) as err:
        admin.read_node("nope")
    body = status_of(err.value)
    assert (err.value.status, body["reason"], body["message"]) == (404, "NotFound", 'nodes "nope" not found')


# Server mechanics are checked as the admin: what the writer may do is the admission policy's business
# (tests/rbac), and that policy changes independently of how the server applies a patch.
def test_merge_patch_writes_labels_and_bumps_resource_version(nodes: FakeApiServer, admin: Any) -> None:
    before = admin.read_node("gpu-1").metadata.resource_version
    body = merge({"nvidia.com/gpu.count": "8"}, rv=before)
    after = admin.patch_node("gpu-1", body, _content_type="application/merge-patch+json")
    assert after.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert int(after.metadata.resource_version) > int(before)
    assert nodes.labels("gpu-1")["nvidia.com/gpu.count"] == "8"
    assert nodes.labels("gpu-1")["kubernetes.io/hostname"] == "gpu-1"  # merge leaves other labels alone


def test_null_in_a_merge_patch_removes_the_label(nodes: FakeApiServer, admin: Any) -> None:
    nodes.set_node_labels("gpu-1", {"nvidia.com/old": "x"})
    admin.patch_node("gpu-1", merge({"nvidia.com/old": None}), _content_type="application/merge-patch+json")
    assert "nvidia.com/old" not in nodes.labels("gpu-1")


def test_a_patch_that_changes_nothing_keeps_the_resource_version(admin: Any) -> None:
    first = admin.patch_node(
        "gpu-1", merge({"nvidia.com/a": "1"}), _content_type="application/merge-patch+json"
    )
    again = admin.patch_node(
        "gpu-1", merge({"nvidia.com/a": "1"}), _content_type="application/merge-patch+json"
    )
    assert again.metadata.resource_version == first.metadata.resource_version


def test_stale_resource_version_is_409_conflict(nodes: FakeApiServer, writer: Any) -> None:
    stale = writer.read_node("gpu-1").metadata.resource_version
    nodes.set_node_labels("gpu-1", {"team": "ml"})  # someone else writes in between
    with pytest.raises(client.ApiException) as err:
        writer.patch_node(
            "gpu-1", merge({"nvidia.com/a": "1"}, rv=stale), _content_type="application/merge-patch+json"
        )
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"].startswith(
        'Operation cannot be fulfilled on nodes "gpu-1": the object has been modified'
    )
    assert "nvidia.com/a" not in nodes.labels("gpu-1")


def test_list_with_field_and_label_selectors(writer: Any, nodes: FakeApiServer) -> None:
    one = writer.list_node(field_selector="metadata.name=gpu-1")
    assert [n.metadata.name for n in one.items] == ["gpu-1"]
    assert one.metadata.resource_version == str(nodes.resource_version)
    labelled = writer.list_node(label_selector="nvidia.com/gpu.present=true")
    assert [n.metadata.name for n in labelled.items] == ["gpu-2"]
    assert [n.metadata.name for n in writer.list_node(label_selector="!nvidia.com/gpu.present").items] == [
        "gpu-1"
    ]


def test_unknown_and_revoked_tokens_are_401(nodes: FakeApiServer) -> None:
    token = nodes.token_for_service_account("gpu-labeller", "nfd-lite", node_name="gpu-1")
    nodes.revoke_token(token)
    for bad in (token, "not-a-token"):
        with nodes.api_client(bad) as api_client, pytest.raises(client.ApiException) as err:
            client.CoreV1Api(api_client).read_node("gpu-1")
        assert (err.value.status, status_of(err.value)["reason"]) == (401, "Unauthorized")
    assert nodes.requests[-1].user is None


CLUSTER = "at the cluster scope"


@pytest.mark.parametrize(
    ("call", "subject", "verb", "resource", "scope"),
    [
        (
            lambda v1: v1.replace_node("gpu-1", v1.read_node("gpu-1")),
            'nodes "gpu-1"',
            "update",
            "nodes",
            CLUSTER,
        ),
        (
            lambda v1: v1.patch_node_status("gpu-1", {"status": {}}),
            'nodes "gpu-1"',
            "patch",
            "nodes/status",
            CLUSTER,
        ),
        (lambda v1: v1.delete_node("gpu-1"), 'nodes "gpu-1"', "delete", "nodes", CLUSTER),
        (
            lambda v1: v1.list_namespaced_secret("gpu-labeller"),
            "secrets",
            "list",
            "secrets",
            'in the namespace "gpu-labeller"',
        ),
    ],
)
def test_rbac_refuses_what_the_role_does_not_grant(
    writer: Any, call: Any, subject: str, verb: str, resource: str, scope: str
) -> None:
    with pytest.raises(client.ApiException) as err:
        call(writer)
    body = status_of(err.value)
    message = (
        f'{subject} is forbidden: User "{SA}" cannot {verb} resource "{resource}" in API group "" {scope}'
    )
    assert (err.value.status, body["reason"], body["message"]) == (403, "Forbidden", message)


def test_anonymous_may_read_version_but_not_nodes(nodes: FakeApiServer) -> None:
    with nodes.api_client(None) as api_client:
        assert client.VersionApi(api_client).get_code().git_version == "v1.32.0"
        with pytest.raises(client.ApiException) as err:
            client.CoreV1Api(api_client).list_node()
    assert status_of(err.value)["message"] == (
        'nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API group "" ' + CLUSTER
    )


def test_kubeconfig_works_with_the_official_loader(nodes: FakeApiServer, tmp_path: Any) -> None:
    path = nodes.write_kubeconfig(tmp_path / "kubeconfig", nodes.admin_token())
    with config.new_client_from_config(str(path)) as api_client:
        v1: Any = client.CoreV1Api(api_client)
        names = [n.metadata.name for n in v1.list_node().items]
    assert names == ["gpu-1", "gpu-2"]


def test_requests_are_logged_with_their_user(nodes: FakeApiServer, writer: Any) -> None:
    with contextlib.suppress(client.ApiException):  # logged whether admitted or not
        writer.patch_node("gpu-2", merge({"nvidia.com/a": "1"}), _content_type="application/merge-patch+json")
    last = nodes.requests[-1]
    assert (last.method, last.path, last.content_type, last.user) == (
        "PATCH",
        "/api/v1/nodes/gpu-2",
        "application/merge-patch+json",
        SA,
    )
    assert nodes.count(method="PATCH", user=SA) == 1
