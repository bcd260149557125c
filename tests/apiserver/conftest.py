"""Fixtures shared by the fake API server's own tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def nodes(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node("gpu-1")
    apiserver.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"})
    return apiserver


@pytest.fixture
def writer(nodes: FakeApiServer) -> Iterator[Any]:
    token = nodes.token_for_service_account("gpu-labeller", "nfd-lite", node_name="gpu-1")
    with nodes.api_client(token) as api_client:
        yield client.CoreV1Api(api_client)


@pytest.fixture
def admin(nodes: FakeApiServer) -> Iterator[Any]:
    with nodes.api_client(nodes.admin_token()) as api_client:
        yield client.CoreV1Api(api_client)
