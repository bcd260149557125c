"""A real writer (Service + real kubernetes client) in a thread against the fake API server, and the parts
of one the Service put together, without its threads, for tests of one of them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nfd_lite.api.client import NodeApi
from nfd_lite.api.connection import Connection
from nfd_lite.api.kubeconfig import kubeconfig_connection
from nfd_lite.files.features import FeatureState
from nfd_lite.files.policy import DEFAULT_ALLOW_PREFIXES, Policy
from nfd_lite.files.scanreport import ScanReporter
from nfd_lite.metrics import WriterMetrics
from nfd_lite.node.inbox import Inbox
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from nfd_lite.node.sync import NodeSync
from nfd_lite.service import Service
from nfd_lite.settings import WriterSettings
from tests.apiserver.server import FakeApiServer
from tests.service_thread import ServiceThread
from tests.waiting import eventually, write_atomic

__all__ = [
    "NODE",
    "OTHER_NODE",
    "Parts",
    "Writer",
    "connection_to",
    "eventually",
    "node_api",
    "ours",
    "owned",
    "parts",
    "write_atomic",
]

NODE = "gpu-1"
OTHER_NODE = "gpu-2"


def owned(apiserver: FakeApiServer, node: str = NODE) -> str | None:
    annotations = apiserver.get_node(node)["metadata"].get("annotations") or {}
    value = annotations.get(OWNED_ANNOTATION)
    return None if value is None else str(value)


def ours(apiserver: FakeApiServer, node: str = NODE) -> dict[str, str]:
    return {k: v for k, v in apiserver.labels(node).items() if k.startswith(("nvidia.com/", "feature.node"))}


def connection_to(
    apiserver: FakeApiServer, tmp_path: Path, node: str = NODE, token: str | None = None
) -> Connection:
    """The writer's connection to ``apiserver``: a kubeconfig with the pod-bound token of ``node``."""
    token = token or apiserver.token_for_service_account("gpu-labeller", "nfd-lite", node_name=node)
    return kubeconfig_connection(apiserver.write_kubeconfig(tmp_path / f"kubeconfig-{node}", token))


def node_api(apiserver: FakeApiServer, tmp_path: Path, node: str = NODE, token: str | None = None) -> NodeApi:
    """A client of its own, for what runs without the writer (prune, the self-check)."""
    return NodeApi(connection_to(apiserver, tmp_path, node, token), node, request_timeout=5.0)


def _recorded_patches(api: NodeApi) -> list[dict[str, Any]]:
    """The body of every patch ``api`` sends from now on (dry-run probes aside), as a test spy."""
    patches: list[dict[str, Any]] = []
    send = api.patch_node

    def patch_node(body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        if not dry_run:
            patches.append(copy.deepcopy(dict(body)))
        return send(body, dry_run=dry_run)

    api.patch_node = patch_node  # type: ignore[method-assign]
    return patches


@dataclass
class Parts:
    """The parts of one writer as ``Service`` joins them, minus its threads: a test drives them itself."""

    service: Service
    patches: list[dict[str, Any]]  # the bodies of the patches sent, dry runs aside

    @property
    def api(self) -> NodeApi:
        return self.service.api

    @property
    def settings(self) -> WriterSettings:
        return self.service.settings

    @property
    def features(self) -> FeatureState:
        return self.service.features

    @property
    def inbox(self) -> Inbox:
        return self.service.inbox

    @property
    def scan(self) -> ScanReporter:
        return self.service.scan

    @property
    def sync(self) -> NodeSync:
        return self.service.node_sync

    @property
    def metrics(self) -> WriterMetrics:
        return self.service.metrics

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels or None) or 0.0


def parts(apiserver: FakeApiServer, tmp_path: Path, **settings: Any) -> Parts:
    """The parts of a writer for NODE, reading ``tmp_path``/features.d (created), retrying quickly."""
    features_dir = tmp_path / "features.d"
    features_dir.mkdir(exist_ok=True)
    options: dict[str, Any] = {
        "policy": Policy.from_prefixes(DEFAULT_ALLOW_PREFIXES, ["nvidia.com/*"]),
        "require_admission_policy": False,  # the fake API server enforces no admission policy
        "startup_grace": 0.0,
        "max_backoff": 0.1,
        "request_timeout": 5.0,
    } | settings
    service = Service(WriterSettings(NODE, [features_dir], **options), connection_to(apiserver, tmp_path))
    return Parts(service, _recorded_patches(service.api))


class Writer(ServiceThread):
    """``with Writer(apiserver, tmp_path) as w:`` runs the writer until the block ends."""

    def __init__(
        self,
        apiserver: FakeApiServer,
        tmp_path: Path,
        *,
        connection: Connection | None = None,
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
        super().__init__(connection or connection_to(apiserver, tmp_path), NODE, features, **options)
