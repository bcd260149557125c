"""Injected faults reach the official client the way real network and server faults do."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def v1(apiserver: FakeApiServer) -> Iterator[Any]:
    apiserver.add_node("gpu-1")
    with apiserver.api_client(apiserver.admin_token()) as api_client:
        yield client.CoreV1Api(api_client)


def test_status_fault_answers_the_next_request_then_stops(apiserver: FakeApiServer, v1: Any) -> None:
    fault = apiserver.inject(method="GET", path="/api/v1/nodes/gpu-1", status=503)
    with pytest.raises(client.ApiException) as err:
        v1.read_node("gpu-1")
    assert err.value.status == 503
    assert v1.read_node("gpu-1").metadata.name == "gpu-1"
    assert fault.hits == 1


def test_429_carries_retry_after(apiserver: FakeApiServer, v1: Any) -> None:
    apiserver.inject(method="PATCH", status=429, retry_after=7)
    with pytest.raises(client.ApiException) as err:
        v1.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/a": "1"}}})
    assert err.value.status == 429
    assert (err.value.headers or {})["Retry-After"] == "7"
    assert "nvidia.com/a" not in apiserver.labels("gpu-1")


def test_connection_reset_gives_no_answer_and_writes_nothing(apiserver: FakeApiServer, v1: Any) -> None:
    apiserver.inject(method="PATCH", reset=True)
    with pytest.raises(urllib3.exceptions.HTTPError):
        v1.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/a": "1"}}})
    assert "nvidia.com/a" not in apiserver.labels("gpu-1")


def test_delay_makes_a_client_timeout_fire(apiserver: FakeApiServer, v1: Any) -> None:
    fault = apiserver.inject(method="GET", path="/api/v1/nodes/*", delay=1.0, count=None)
    with pytest.raises(urllib3.exceptions.HTTPError):
        v1.read_node("gpu-1", _request_timeout=0.1)
    assert fault.hits == 4  # urllib3 retried the GET three times on its own


def test_one_reset_of_a_get_is_retried_by_urllib3_unseen(apiserver: FakeApiServer, v1: Any) -> None:
    fault = apiserver.inject(method="GET", path="/api/v1/nodes/gpu-1", reset=True)
    assert v1.read_node("gpu-1").metadata.name == "gpu-1"
    assert fault.hits == 1
    assert apiserver.count(method="GET", path="/api/v1/nodes/gpu-1") == 2


def test_forced_410_on_the_next_watch(apiserver: FakeApiServer, v1: Any) -> None:
    apiserver.inject(watch=True, gone=True)
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(v1.list_node, timeout_seconds=5):
            pass
    assert err.value.status == 410


def test_watch_reset_mid_stream_reaches_the_client(apiserver: FakeApiServer, v1: Any) -> None:
    def reset_once_open() -> None:
        assert apiserver.wait_for_watches(1)
        apiserver.drop_watches(reset=True)

    helper = threading.Thread(target=reset_once_open)
    helper.start()
    seen = []
    with pytest.raises(urllib3.exceptions.HTTPError):
        for event in watch.Watch().stream(v1.list_node, timeout_seconds=30):
            seen.append(event["type"])
    helper.join()
    assert seen == ["ADDED"]


def test_dropped_watch_is_resumed_by_the_client_from_its_last_resource_version(
    apiserver: FakeApiServer, v1: Any
) -> None:
    def drop_then_change() -> None:
        assert apiserver.wait_for_watches(1)
        apiserver.drop_watches()
        assert apiserver.wait_for_watch_starts(2)  # the client came back
        apiserver.set_node_labels("gpu-1", {"nvidia.com/after": "drop"})

    helper = threading.Thread(target=drop_then_change)
    helper.start()
    w = watch.Watch()
    seen = []
    for event in w.stream(v1.list_node):
        seen.append((event["type"], event["object"].metadata.resource_version))
        if event["type"] == "MODIFIED":
            w.stop()  # from inside the loop: stop() from another thread breaks the socket under the reader
    helper.join()
    watches = [r for r in apiserver.requests if r.query.get("watch") == "true"]
    assert len(watches) == 2
    assert [t for t, _ in seen] == ["ADDED", "MODIFIED"]
    assert watches[1].query["resourceVersion"] == seen[0][1]  # resumed, not re-listed
