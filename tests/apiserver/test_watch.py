"""WATCH through the official client: field and label selectors, resourceVersion, bookmarks, 410."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client, watch

from tests.apiserver.server import FakeApiServer


def _watch_events(
    api: FakeApiServer, v1: Any, during: Any, **kwargs: Any
) -> list[tuple[str, str | None, dict[str, str]]]:
    """Events of one watch stream (ending by its timeout), while `during()` runs once it is open."""

    def when_open() -> None:
        assert api.wait_for_watches(1)
        during()

    helper = threading.Thread(target=when_open)
    helper.start()
    seen = []
    for event in watch.Watch().stream(v1.list_node, **kwargs):
        meta = event["raw_object"].get("metadata", {})
        seen.append((event["type"], meta.get("name"), dict(meta.get("labels") or {})))
    helper.join()
    return seen


def test_watch_own_node_sees_changes_to_it_only(nodes: FakeApiServer, writer: Any) -> None:
    def during() -> None:
        nodes.set_node_labels("gpu-2", {"nvidia.com/x": "other"})
        nodes.set_node_labels("gpu-1", {"nvidia.com/x": "mine"})

    events = _watch_events(nodes, writer, during, field_selector="metadata.name=gpu-1", timeout_seconds=1)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "gpu-1"), ("MODIFIED", "gpu-1")]
    assert events[-1][2]["nvidia.com/x"] == "mine"


def test_watch_from_a_resource_version_replays_later_changes(nodes: FakeApiServer, writer: Any) -> None:
    rv = writer.list_node(field_selector="metadata.name=gpu-1").metadata.resource_version
    nodes.set_node_labels("gpu-1", {"nvidia.com/y": "1"})
    nodes.set_node_labels("gpu-1", {"nvidia.com/y": "2"})
    stream = watch.Watch().stream(
        writer.list_node, field_selector="metadata.name=gpu-1", resource_version=rv, timeout_seconds=1
    )
    values = [e["object"].metadata.labels["nvidia.com/y"] for e in stream]
    assert values == ["1", "2"]


def test_watch_sends_bookmarks_when_allowed(nodes: FakeApiServer, writer: Any) -> None:
    rv = writer.list_node(field_selector="metadata.name=gpu-1").metadata.resource_version
    nodes.set_node_labels("gpu-2", {"nvidia.com/z": "1"})  # a change the watcher is not shown
    w = watch.Watch()
    types = []

    def bookmark_once_open() -> None:
        assert nodes.wait_for_watches(1)
        nodes.send_bookmarks()

    helper = threading.Thread(target=bookmark_once_open)
    helper.start()
    for event in w.stream(
        writer.list_node,
        field_selector="metadata.name=gpu-1",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=2,
    ):
        types.append(event["type"])
        w.stop()
    helper.join()
    assert types == ["BOOKMARK"]
    assert (
        int(str(w.resource_version)) == nodes.resource_version
    )  # the bookmark moved it past the hidden change


def test_watch_from_a_compacted_resource_version_gets_410(nodes: FakeApiServer, writer: Any) -> None:
    rv = writer.list_node(field_selector="metadata.name=gpu-1").metadata.resource_version
    nodes.set_node_labels("gpu-1", {"nvidia.com/y": "1"})
    nodes.compact()
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(writer.list_node, resource_version=rv, timeout_seconds=1):
            pass
    assert err.value.status == 410
    assert "too old resource version" in str(err.value.reason)


def test_raw_watch_error_event_is_a_410_status(nodes: FakeApiServer) -> None:
    nodes.compact()
    with nodes.api_client(nodes.admin_token()) as api_client:
        response = api_client.call_api(
            "GET",
            f"{nodes.url}/api/v1/nodes?watch=true&resourceVersion=1&timeoutSeconds=1",
            header_params={
                "Authorization": api_client.configuration.get_api_key_with_prefix("authorization")
            },
        )
        response.read()
    assert response.status == 200
    event = json.loads(response.data.splitlines()[0])
    assert event["type"] == "ERROR"
    assert event["object"] | {"message": ""} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "",
        "reason": "Expired",
        "code": 410,
    }


def test_label_selector_watch_sees_nodes_enter_and_leave_the_selection(
    nodes: FakeApiServer, writer: Any
) -> None:
    def during() -> None:
        nodes.set_node_labels("gpu-1", {"nvidia.com/gpu.present": "true"})
        nodes.set_node_labels("gpu-2", {"nvidia.com/gpu.present": None})

    events = _watch_events(
        nodes, writer, during, label_selector="nvidia.com/gpu.present=true", timeout_seconds=1
    )
    assert [(t, n) for t, n, _ in events] == [("ADDED", "gpu-2"), ("ADDED", "gpu-1"), ("DELETED", "gpu-2")]


def test_an_unknown_field_selector_is_400_before_any_stream(writer: Any) -> None:
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(writer.list_node, field_selector="spec.podCIDR=x", timeout_seconds=1):
            pass
    assert err.value.status == 400


def test_the_legacy_single_object_watch_path_watches_that_node(nodes: FakeApiServer) -> None:
    nodes.compact()
    with nodes.api_client(nodes.admin_token()) as api_client:
        auth = api_client.configuration.get_api_key_with_prefix("authorization")
        response = api_client.call_api(
            "GET",
            f"{nodes.url}/api/v1/watch/nodes/gpu-2?timeoutSeconds=1",
            header_params={"Authorization": auth},
        )
        response.read()
    events = [json.loads(line) for line in response.data.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "gpu-2")]
