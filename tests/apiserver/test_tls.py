"""With tls=True the server speaks HTTPS, so kubeconfig and in-cluster configuration work unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.config.incluster_config import InClusterConfigLoader

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def tls_server() -> Iterator[FakeApiServer]:
    with FakeApiServer(tls=True) as server:
        server.add_node("gpu-1")
        yield server


def test_kubeconfig_carries_the_ca_and_verifies_the_server(tls_server: FakeApiServer, tmp_path: Path) -> None:
    assert tls_server.url.startswith("https://127.0.0.1:")
    path = tls_server.write_kubeconfig(tmp_path / "kubeconfig", tls_server.admin_token())
    with config.new_client_from_config(str(path)) as api_client:
        v1: Any = client.CoreV1Api(api_client)
        assert v1.read_node("gpu-1").metadata.name == "gpu-1"


def test_in_cluster_loader_reads_the_service_account_dir(tls_server: FakeApiServer, tmp_path: Path) -> None:
    token = tls_server.token_for_service_account("gpu-labeller", "nfd-lite", node_name="gpu-1")
    sa_dir = tls_server.write_service_account_dir(tmp_path / "sa", token)
    configuration = client.Configuration()
    loader = InClusterConfigLoader(
        token_filename=str(sa_dir / "token"),
        cert_filename=str(sa_dir / "ca.crt"),
        environ=tls_server.in_cluster_env,
    )
    loader.load_and_set(configuration)
    with client.ApiClient(configuration) as api_client:
        v1: Any = client.CoreV1Api(api_client)
        assert v1.read_node("gpu-1").metadata.name == "gpu-1"
    assert tls_server.requests[-1].user == "system:serviceaccount:gpu-labeller:nfd-lite"
    assert (sa_dir / "namespace").read_text() == "gpu-labeller"


def test_a_client_without_the_ca_is_refused(tls_server: FakeApiServer) -> None:
    configuration = client.Configuration(host=tls_server.url)
    configuration.retries = False
    with (
        client.ApiClient(configuration) as api_client,
        pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.CoreV1Api(api_client).read_node("gpu-1")
