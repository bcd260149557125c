"""A real writer (Service + real kubernetes client) in a thread against the fake API server, and the
writer's parts put together without the Service for tests of one of them."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nfd_lite.api.client import NodeApi
from nfd_lite.api.kubeconfig import kubeconfig_connection
from nfd_lite.api.retry import Outage, RetryPolicy
from nfd_lite.files.features import FeatureState
from nfd_lite.files.policy import DEFAULT_ALLOW_PREFIXES, Policy
from nfd_lite.files.scanreport import ScanReporter
from nfd_lite.metrics import WriterMetrics
from nfd_lite.node.inbox import Inbox
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from nfd_lite.node.sync import NodeSync
from nfd_lite.settings import WriterSettings
from tests.apiserver.server import FakeApiServer
from tests.service_thread import ServiceThread
from tests.waiting import eventually, write_atomic

__all__ = [
    "NODE",
    "OTHER_NODE",
    "Parts",
    "Writer",
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


def node_api(apiserver: FakeApiServer, tmp_path: Path, node: str = NODE, token: str | None = None) -> NodeApi:
    token = token or apiserver.token_for_service_account("gpu-labeller", "nfd-lite", node_name=node)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / f"kubeconfig-{node}", token)
    return NodeApi(kubeconfig_connection(kubeconfig), node, request_timeout=5.0)


class RecordingApi(NodeApi):
    """The real client, keeping the body of every patch it sends (dry-run probes aside)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.patches: list[dict[str, Any]] = []

    def patch_node(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        if not dry_run:
            self.patches.append(copy.deepcopy(dict(body)))
        return super().patch_node(body, dry_run=dry_run)


@dataclass
class Parts:
    """The parts of one writer as ``Service`` joins them, minus its threads: a test drives them itself."""

    api: RecordingApi
    settings: WriterSettings
    features: FeatureState
    inbox: Inbox
    scan: ScanReporter
    sync: NodeSync
    metrics: WriterMetrics
    stop: threading.Event

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels or None) or 0.0


def parts(apiserver: FakeApiServer, tmp_path: Path, **settings: Any) -> Parts:
    """A writer's parts for NODE, reading ``tmp_path``/features.d (created), retrying quickly."""
    features_dir = tmp_path / "features.d"
    features_dir.mkdir(exist_ok=True)
    token = apiserver.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / f"kubeconfig-{NODE}", token)
    api = RecordingApi(kubeconfig_connection(kubeconfig), NODE, request_timeout=5.0)
    options: dict[str, Any] = {
        "policy": Policy.from_prefixes(DEFAULT_ALLOW_PREFIXES, ["nvidia.com/*"]),
        "require_admission_policy": False,  # the fake API server enforces no admission policy
        "startup_grace": 0.0,
        "max_backoff": 0.1,
    } | settings
    config = WriterSettings(NODE, [features_dir], **options)
    metrics, stop, outage = WriterMetrics(), threading.Event(), Outage(config.policy_recheck_after)
    retry = RetryPolicy(max_backoff=config.max_backoff, stop=stop, metrics=metrics, outage=outage)
    features = FeatureState(config.directories, config.policy, config.limits)
    inbox = Inbox(config.debounce, config.debounce_cap)
    sync = NodeSync(
        settings=config,
        api=api,
        features=features,
        inbox=inbox,
        retry=retry,
        outage=outage,
        metrics=metrics,
    )
    return Parts(api, config, features, inbox, ScanReporter(features, metrics), sync, metrics, stop)


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
