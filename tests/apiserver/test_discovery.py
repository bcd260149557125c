"""Discovery, /version and RuntimeClasses, as clients and `gfd doctor` read them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def admin(apiserver: FakeApiServer) -> Iterator[Any]:
    apiserver.add_runtime_class("nvidia")
    with apiserver.api_client(apiserver.admin_token()) as api_client:
        yield api_client


def test_runtime_classes_get_and_list(admin: Any) -> None:
    node_api: Any = client.NodeV1Api(admin)
    assert node_api.read_runtime_class("nvidia").handler == "nvidia"
    assert [r.metadata.name for r in node_api.list_runtime_class().items] == ["nvidia"]
    with pytest.raises(client.ApiException) as err:
        node_api.read_runtime_class("kata")
    assert err.value.status == 404


def test_the_writer_may_not_read_runtime_classes(apiserver: FakeApiServer) -> None:
    apiserver.add_node("gpu-1")
    token = apiserver.token_for_service_account("gpu-labeller", "nfd-lite", node_name="gpu-1")
    with apiserver.api_client(token) as api_client, pytest.raises(client.ApiException) as err:
        client.NodeV1Api(api_client).read_runtime_class("nvidia")
    assert err.value.status == 403
    assert json.loads(err.value.body or "{}")["message"].startswith(
        'runtimeclasses.node.k8s.io "nvidia" is forbidden'
    )


def test_discovery_documents(admin: Any) -> None:
    assert client.CoreApi(admin).get_api_versions().versions == ["v1"]
    groups: Any = client.ApisApi(admin).get_api_versions()
    assert [g.name for g in groups.groups] == ["node.k8s.io"]
    resources: Any = client.CoreV1Api(admin).get_api_resources()
    assert {r.name for r in resources.resources} == {"nodes", "nodes/status"}
    assert client.VersionApi(admin).get_code().minor == "32"
