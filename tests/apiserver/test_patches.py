"""Strategic merge, JSON patch, server-side apply and validation, as the real server answers them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def admin(apiserver: FakeApiServer) -> Iterator[Any]:
    apiserver.add_node("gpu-1", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    with apiserver.api_client(apiserver.admin_token()) as api_client:
        yield client.CoreV1Api(api_client)


def error(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as err:
        call()
    return err.value.status, json.loads(err.value.body or "{}")


def test_a_dict_body_is_sent_as_strategic_merge_and_merges_labels(
    apiserver: FakeApiServer, admin: Any
) -> None:
    admin.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/a": "1"}}})
    assert apiserver.requests[-1].content_type == "application/strategic-merge-patch+json"
    assert apiserver.labels("gpu-1")["kubernetes.io/hostname"] == "gpu-1"
    assert apiserver.labels("gpu-1")["nvidia.com/a"] == "1"


def test_strategic_merge_merges_taints_by_key(apiserver: FakeApiServer, admin: Any) -> None:
    admin.patch_node(
        "gpu-1", {"spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoExecute"}]}}
    )
    keys = [t["key"] for t in apiserver.get_node("gpu-1")["spec"]["taints"]]
    assert keys == ["nvidia.com/gpu", "dedicated"]


def test_json_patch_adds_and_removes_escaped_label_keys(apiserver: FakeApiServer, admin: Any) -> None:
    admin.patch_node("gpu-1", [{"op": "add", "path": "/metadata/labels/nvidia.com~1b", "value": "2"}])
    assert apiserver.requests[-1].content_type == "application/json-patch+json"
    assert apiserver.labels("gpu-1")["nvidia.com/b"] == "2"
    admin.patch_node("gpu-1", [{"op": "remove", "path": "/metadata/labels/nvidia.com~1b"}])
    assert "nvidia.com/b" not in apiserver.labels("gpu-1")


def test_json_patch_failing_test_op_is_422_and_changes_nothing(apiserver: FakeApiServer, admin: Any) -> None:
    before = apiserver.resource_version
    ops = [
        {"op": "test", "path": "/metadata/labels/kubernetes.io~1os", "value": "windows"},
        {"op": "add", "path": "/metadata/labels/nvidia.com~1c", "value": "3"},
    ]
    code, _ = error(lambda: admin.patch_node("gpu-1", ops))
    assert code == 422
    assert apiserver.resource_version == before


def test_invalid_label_value_is_422_invalid(admin: Any) -> None:
    code, body = error(
        lambda: admin.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/a": "not valid!"}}})
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith('Node "gpu-1" is invalid: metadata.labels: Invalid value: "not valid!"')


def test_unknown_patch_content_type_is_415(admin: Any) -> None:
    code, body = error(lambda: admin.patch_node("gpu-1", {"metadata": {}}, _content_type="application/json"))
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")


def apply(v1: Any, labels: dict[str, str], manager: str, force: bool = False) -> Any:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}
    return v1.patch_node(
        "gpu-1", body, field_manager=manager, force=force, _content_type="application/apply-patch+yaml"
    )


def test_apply_tracks_ownership_and_removes_labels_the_manager_dropped(
    apiserver: FakeApiServer, admin: Any
) -> None:
    apply(admin, {"nvidia.com/a": "1", "nvidia.com/b": "2"}, "nfd-lite")
    node = apiserver.get_node("gpu-1")
    mine = next(e for e in node["metadata"]["managedFields"] if e["manager"] == "nfd-lite")
    assert mine["operation"] == "Apply"
    assert set(mine["fieldsV1"]["f:metadata"]["f:labels"]) == {"f:nvidia.com/a", "f:nvidia.com/b"}
    apply(admin, {"nvidia.com/a": "1"}, "nfd-lite")
    labels = apiserver.labels("gpu-1")
    assert "nvidia.com/b" not in labels
    assert labels["kubernetes.io/hostname"] == "gpu-1"  # the kubelet's labels are not the applier's to remove


def test_apply_conflicts_with_another_owner_unless_forced(apiserver: FakeApiServer, admin: Any) -> None:
    apiserver.set_node_labels("gpu-1", {"nvidia.com/a": "theirs"}, manager="someone")
    code, body = error(lambda: apply(admin, {"nvidia.com/a": "mine"}, "nfd-lite"))
    assert (code, body["reason"]) == (409, "Conflict")
    assert (
        body["message"]
        == 'Apply failed with 1 conflict: conflict with "someone" using v1: .metadata.labels.nvidia.com/a'
    )
    apply(admin, {"nvidia.com/a": "mine"}, "nfd-lite", force=True)
    assert apiserver.labels("gpu-1")["nvidia.com/a"] == "mine"


def test_a_label_shared_with_another_manager_survives_the_applier_dropping_it(
    apiserver: FakeApiServer, admin: Any
) -> None:
    apiserver.set_node_labels("gpu-1", {"nvidia.com/a": "1"}, manager="someone")
    apply(admin, {"nvidia.com/a": "1"}, "nfd-lite")  # same value: shared, no conflict
    apply(admin, {}, "nfd-lite")
    assert apiserver.labels("gpu-1")["nvidia.com/a"] == "1"


def test_apply_without_field_manager_is_400(admin: Any) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}}
    code, _ = error(lambda: admin.patch_node("gpu-1", body, _content_type="application/apply-patch+yaml"))
    assert code == 400


def test_patching_status_through_the_main_resource_is_ignored(apiserver: FakeApiServer, admin: Any) -> None:
    admin.patch_node("gpu-1", {"status": {"allocatable": {"pods": "1"}}})
    assert apiserver.get_node("gpu-1")["status"]["allocatable"]["pods"] == "110"
    admin.patch_node_status("gpu-1", {"status": {"allocatable": {"pods": "1"}}})
    assert apiserver.get_node("gpu-1")["status"]["allocatable"]["pods"] == "1"


def test_update_is_conditional_only_when_it_carries_a_resource_version(
    apiserver: FakeApiServer, admin: Any
) -> None:
    node = admin.read_node("gpu-1")
    apiserver.set_node_labels("gpu-1", {"team": "ml"})
    node.metadata.labels["nvidia.com/a"] = "1"
    code, body = error(lambda: admin.replace_node("gpu-1", node))
    assert (code, body["reason"]) == (409, "Conflict")
    node.metadata.resource_version = None
    admin.replace_node("gpu-1", node)  # unconditional: overwrites the concurrent change, as on a real server
    assert apiserver.labels("gpu-1").get("nvidia.com/a") == "1" and "team" not in apiserver.labels("gpu-1")


def test_an_empty_resource_version_in_a_patch_is_no_precondition(
    apiserver: FakeApiServer, admin: Any
) -> None:
    body = {"metadata": {"resourceVersion": "", "labels": {"nvidia.com/a": "1"}}}
    admin.patch_node("gpu-1", body, _content_type="application/merge-patch+json")
    assert apiserver.labels("gpu-1")["nvidia.com/a"] == "1"
