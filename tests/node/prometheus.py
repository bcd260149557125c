"""A real Prometheus server on the test node, scraping the chart's pods as the Prometheus Operator would
scrape them for the chart's ServiceMonitor, and evaluating the chart's PrometheusRule.

The server is built from Prometheus' pinned Go module (scripts/peers/prometheus, with Kubernetes service
discovery and no other). It runs in the node's network namespace, as a Prometheus on the host network of a
node would: it reaches the pods' IPs through the node's CNI bridge and the API server on the node's
loopback; the test reaches its HTTP API through a ``Forwarder``. Whatever the test does not stop, the
node's ``sweep`` kills with the namespace.

What the Operator would do, done here: each ServiceMonitor endpoint becomes a scrape job with the labels
the Operator sets (``job`` the Service's name, ``namespace``, ``pod``, ``container``, ``service``,
``endpoint`` the port's name) and the ServiceMonitor's own relabelings (the chart's ``node``). One
difference: the targets come from Kubernetes SD's ``pod`` role, selected by the Service's selector and the
port's name, not from the ``endpoints`` role, because this node runs no endpoints or EndpointSlice
controller; the pods and ports are the ones the Service's endpoints would list (unready pods included,
as the endpoints role includes not-ready addresses)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tests.kube.controlplane import ROOT
from tests.node.cluster import NodeCluster
from tests.node.namespaces import Forwarder

PROMETHEUS = ROOT / ".cache" / "peers" / "prometheus" / "prometheus"
PORT = 9090  # on the loopback of the node's network namespace, where nothing else listens on it
_DURATION = re.compile(r"(\d+)([smh])")
_SECONDS = {"s": 1, "m": 60, "h": 3600}
# The ServiceMonitor's relabeling fields, as Prometheus' relabel_configs spell them.
_RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def seconds(duration: str) -> int:
    """A Prometheus duration made of s, m and h parts (``1m30s``), in seconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"duration {duration!r}: only s, m and h parts are understood here")
    return sum(int(n) * _SECONDS[u] for n, u in parts)


def rule_groups(prometheus_rule: dict[str, Any], divide_for_by: int = 1) -> dict[str, Any]:
    """The PrometheusRule's groups as a Prometheus rule file, each alert's ``for:`` divided by
    ``divide_for_by`` (rounded up to whole seconds), so that a test need not wait out minutes."""
    groups = json.loads(json.dumps(prometheus_rule["spec"]["groups"]))
    for group in groups:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{-(-seconds(rule['for']) // divide_for_by)}s"
    return {"groups": groups}


def _relabeling(relabeling: dict[str, Any]) -> dict[str, Any]:
    unknown = set(relabeling) - set(_RELABEL_KEYS)
    if unknown:
        raise ValueError(f"ServiceMonitor relabeling {relabeling}: {sorted(unknown)} not translated here")
    out = {_RELABEL_KEYS[key]: value for key, value in relabeling.items()}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def scrape_configs(
    service_monitor: dict[str, Any], service: dict[str, Any], kubeconfig: Path
) -> list[dict[str, Any]]:
    """One scrape job per endpoint of ``service_monitor``, whose pods are those ``service`` selects."""
    meta, spec = service_monitor["metadata"], service_monitor["spec"]
    matched = service["metadata"].get("labels") or {}
    wanted = spec["selector"].get("matchLabels") or {}
    if spec["selector"].get("matchExpressions") or any(matched.get(k) != v for k, v in wanted.items()):
        raise ValueError(
            f"ServiceMonitor {meta['name']} does not select Service {service['metadata']['name']}"
        )
    selector = service["spec"]["selector"]
    keys = sorted(selector)
    jobs = []
    for index, endpoint in enumerate(spec["endpoints"]):
        relabel: list[dict[str, Any]] = [
            # The pods the Service selects, as its endpoints would hold them.
            {
                "action": "keep",
                "source_labels": [f"__meta_kubernetes_pod_label_{_sanitized(k)}" for k in keys],
                "separator": ";",
                "regex": ";".join(re.escape(selector[k]) for k in keys),
            },
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Succeeded|Failed"},
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": re.escape(endpoint["port"]),
            },
            # The labels the Operator sets on every ServiceMonitor target.
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"target_label": "service", "replacement": service["metadata"]["name"]},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"target_label": "job", "replacement": service["metadata"]["name"]},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
            *(_relabeling(r) for r in endpoint.get("relabelings") or []),
        ]
        jobs.append(
            {
                "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
                "scrape_interval": endpoint.get("interval", "30s"),
                "metrics_path": endpoint.get("path", "/metrics"),
                "kubernetes_sd_configs": [
                    {
                        "role": "pod",
                        "kubeconfig_file": str(kubeconfig),
                        "namespaces": {"names": spec["namespaceSelector"]["matchNames"]},
                    }
                ],
                "relabel_configs": relabel,
            }
        )
    return jobs


def _sanitized(label: str) -> str:
    """A Kubernetes label key as Kubernetes SD names its meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


class Prometheus:
    """``with Prometheus(cluster, scrape, rules, evaluation_interval) as prometheus:`` a server in the
    node's network namespace, its data and log in the node's directory; stopped on leaving."""

    def __init__(
        self,
        cluster: NodeCluster,
        scrape: list[dict[str, Any]],
        rules: dict[str, Any],
        evaluation_interval: str,
    ) -> None:
        self._cluster = cluster
        self.directory = cluster.workdir / "prometheus"
        self.log = cluster.logs / "prometheus.log"
        self._config = {
            "global": {"evaluation_interval": evaluation_interval},
            "rule_files": [str(self.directory / "rules.yaml")],
            "scrape_configs": scrape,
        }
        self._rules = rules
        self._process: subprocess.Popen[bytes] | None = None
        self._forwarder: Forwarder | None = None

    def __enter__(self) -> Prometheus:
        if not PROMETHEUS.exists():
            raise FileNotFoundError(f"{PROMETHEUS} is missing: run scripts/install-tools.sh")
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "rules.yaml").write_text(yaml.safe_dump(self._rules, sort_keys=False))
        (self.directory / "prometheus.yaml").write_text(yaml.safe_dump(self._config, sort_keys=False))
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(
                [
                    *self._cluster.namespaces.enter,
                    str(PROMETHEUS),
                    f"--config.file={self.directory / 'prometheus.yaml'}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{PORT}",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._forwarder = Forwarder(self._cluster.namespaces, ("127.0.0.1", PORT))
        deadline = time.monotonic() + 60
        while not self._ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"Prometheus did not become ready; its log:\n{self.log_tail()}")
            time.sleep(0.5)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
        self._process = None
        if self._forwarder is not None:
            self._forwarder.close()
            self._forwarder = None

    def _ready(self) -> bool:
        try:
            with self._open("/-/ready") as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def _open(self, path: str) -> Any:
        assert self._forwarder is not None, "Prometheus is not running"
        return urllib.request.urlopen(f"http://127.0.0.1:{self._forwarder.port}{path}", timeout=10)

    def api(self, path: str) -> Any:
        """``data`` of a GET of the HTTP API (``/api/v1/...``)."""
        with self._open(path) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise AssertionError(f"GET {path}: {body}")
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (pending and firing), as /api/v1/alerts lists them."""
        return list(self.api("/api/v1/alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("/api/v1/targets?state=active")["activeTargets"])

    def log_tail(self, lines: int = 30) -> str:
        return (
            "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""
        )
