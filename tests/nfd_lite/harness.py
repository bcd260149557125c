"""A real writer (Service + real kubernetes client) in a thread against the fake API server, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nfd_lite.client import NodeApi
from nfd_lite.kubeconfig import kubeconfig_configuration
from nfd_lite.policy import DEFAULT_ALLOW_PREFIXES, Policy
from nfd_lite.reconciler import OWNED_ANNOTATION
from tests.apiserver.server import FakeApiServer
from tests.service_thread import ServiceThread
from tests.waiting import eventually, write_atomic

__all__ = ["NODE", "OTHER_NODE", "Writer", "eventually", "node_api", "ours", "owned", "write_atomic"]

NODE = "gpu-1"
OTHER_NODE = "gpu-2"


def owned(apiserver: FakeApiServer, node: str = NODE) -> str | None:
    annotations = apiserver.get_node(node)["metadata"].get("annotations") or {}
    value = annotations.get(OWNED_ANNOTATION)
    return None if value is None else str(value)


def ours(apiserver: FakeApiServer, node: str = NODE) -> dict[str, str]:
    return {k: v for k, v in apiserver.labels(node).items() if k.startswith(("nvidia.com/", "feature.node"))}


def node_api(apiserver: FakeApiServer, tmp_path: Path, node: str = NODE, token: str | None = None) -> NodeApi:
    token = token or apiserver.token_for_service_account("gpu-labeller", "nfd-lite", node_name=node)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / f"kubeconfig-{node}", token)
    return NodeApi(kubeconfig_configuration(kubeconfig), node, request_timeout=5.0)


class Writer(ServiceThread):
    """``with Writer(apiserver, tmp_path) as w:`` runs the writer until the block ends."""

    def __init__(
        self,
        apiserver: FakeApiServer,
        tmp_path: Path,
        *,
        api: NodeApi | None = None,
        directory: Path | None = None,
        **settings: Any,
    ) -> None:
        features = directory or tmp_path / "features.d"
        if directory is None:
            features.mkdir(exist_ok=True)
        # These tests exercise the writer's mechanics with arbitrary nvidia.com/ keys, as --allow-key allows.
        # The fake server does not enforce the admission policy (tests/kube proves it on a real one), so
        # the writer's start-up check that it is enforced would refuse to run here.
        options: dict[str, Any] = {
            "policy": Policy.from_prefixes(DEFAULT_ALLOW_PREFIXES, ["nvidia.com/*"]),
            "require_admission_policy": False,
        } | settings
        super().__init__(api or node_api(apiserver, tmp_path), NODE, features, **options)
