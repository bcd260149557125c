"""The chart's alerts on a real Prometheus, on the real node (docs/alerts.md, "Proven on a real Prometheus").

The chart is installed with its ServiceMonitor and PrometheusRule (the Prometheus Operator's CRDs pinned
in tests/deploy/crds/ served by the node's API server). A Prometheus server built from its pinned module
(tests/node/prometheus.py) scrapes the DaemonSet's pods as the Operator would for that ServiceMonitor,
`node` relabelling included, and evaluates the rules of the PrometheusRule the chart created, read back
from the API server. One change to them: the chart does not make `for:` a value, so the test's copy has
every `for:` divided by 12 (GpuDegraded 2m -> 10s, NfdLiteApiUnreachable 1m -> 5s); scrapes
(`metrics.serviceMonitor.interval`) and evaluations come every 2 s.

gfd reads NVML through the `nvidia` runtime handler, the stand-in for NVIDIA's container toolkit that
injects NVIDIA's mock NVML (a simulated DGX H100). Then, each from a quiet healthy node:

1. a GPU made to fail through the mock (its events file: `GPU is lost`) fires GpuDegraded for that node
   and pod, naming the GPU by the bus address the mock NVML reports for it, and nothing else; it
   resolves once the GPU answers again;
2. the writer cut off from the API server by iptables rules in the node's network namespace (what a
   NetworkPolicy that no longer matches the API server does; this node's CNI enforces no policy) fires
   NfdLiteApiUnreachable, and nothing else; it resolves once the rules go.

The times from fault to firing and from repair to resolved are printed (docs/alerts.md has them)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from gfd.backends.decoding import sysfs_bus_id
from nfd_lite.settings import WriterSettings
from tests.deploy.cni_policies import PROMETHEUS_RULE, SERVICE_MONITOR, serving_crd
from tests.kube.helm import install_crd
from tests.node.cluster import API_PORT, NodeCluster
from tests.node.namespaces import NODE_IP
from tests.node.prometheus import PROMETHEUS, Prometheus, rule_groups, scrape_configs, seconds
from tests.node.release import (
    IMAGE,
    NAMESPACE,
    install,
    prepare_gpu_node,
    the_pod,
    uninstall_pruning,
    wait_until,
)
from tests.parity.peers import describe, mock_env

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-alerts"
MACHINE = "dgxh100"  # eight H100s
SLEEP = 10  # gfd's sleep interval, seconds: a GPU's failure is seen within one
INTERVAL = "2s"  # scrapes and rule evaluations
FOR_DIVISOR = 12
VALUES: dict[str, Any] = {
    "image": IMAGE,
    "gfd": {"sleepInterval": f"{SLEEP}s"},
    "metrics": {
        "serviceMonitor": {"enabled": True, "interval": INTERVAL},
        # The chart's 20 s is for the default 60 s sleep interval (a healthy gfd keeps its labels at least
        # half an interval ahead); scaled down with it.
        "prometheusRule": {"enabled": True, "labelsExpiringSeconds": 2},
    },
    # The chart asks who may scrape once a ServiceMonitor is on: here Prometheus runs on the node's host
    # network (this node's CNI enforces no policy; most let the node in anyway).
    "networkPolicy": {"metricsFrom": [{"ipBlock": {"cidr": f"{NODE_IP}/32"}}]},
}
DEGRADED_FOR = 120 // FOR_DIVISOR
UNREACHABLE_FOR = 60 // FOR_DIVISOR
BOUND = WriterSettings.api_unreachable_after  # nfd_lite_api_unreachable is 1 this long after the last answer
GPU = 3  # the GPU that fails
MONITORING = f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass
class Watched:
    cluster: NodeCluster
    prometheus: Prometheus
    pod: dict[str, Any]
    rules: dict[str, Any]


@pytest.fixture(scope="module")
def watched(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    if not PROMETHEUS.exists():
        pytest.fail(f"{PROMETHEUS} is missing: run scripts/install-tools.sh", pytrace=False)
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("alerts")
    crds = [serving_crd(kind) for kind in (SERVICE_MONITOR, PROMETHEUS_RULE)]
    try:
        for crd in crds:
            install_crd(cluster, crd)
        cluster.set_toolkit({"MOCK_NVML_MACHINE": MACHINE})
        prepare_gpu_node(cluster)
        install(cluster, tmp, RELEASE, VALUES)
        pod = the_pod(cluster, RELEASE)
        # What the Operator would read: the objects the chart created, as the API server keeps them.
        monitor = cluster.must("GET", f"{MONITORING}/servicemonitors/{RELEASE}")
        rule = cluster.must("GET", f"{MONITORING}/prometheusrules/{RELEASE}")
        service = cluster.must("GET", f"/api/v1/namespaces/{NAMESPACE}/services/{RELEASE}-metrics")
        scrape = scrape_configs(monitor, service, cluster.pki / "admin-inside.kubeconfig")
        rules = rule_groups(rule, FOR_DIVISOR)
        with Prometheus(cluster, scrape, rules, INTERVAL) as prometheus:
            yield Watched(cluster, prometheus, pod, rules)
    finally:
        inject(cluster, f"{GPU} answers")
        uninstall_pruning(cluster, tmp, RELEASE)
        for crd in crds:
            cluster.request("DELETE", f"{CRDS}/{crd['metadata']['name']}")
        cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})


def reported_bus_id(gpu: int) -> str:
    """GPU ``gpu``'s bus address as the mock NVML reports it on MACHINE (go-nvml's data, read by the mock's
    describe tool), spelt as sysfs and gfd's log spell it."""
    (device,) = [d for d in describe(mock_env(MACHINE))["devices"] if d["index"] == gpu]
    address = sysfs_bus_id(device["pci_bus_id"])
    assert address is not None, device
    return address


def inject(cluster: NodeCluster, line: str) -> float:
    """A line in the mock NVML's events file (``<gpu index> lost|answers``); when it was written."""
    with open(cluster.events, "a") as events:
        events.write(line + "\n")
    return time.monotonic()


def cut_off_rules(pod_ip: str) -> list[list[str]]:
    """Drop every packet between the pod and the API server's endpoint, both ways."""
    return [
        ["INPUT", "-s", pod_ip, "-p", "tcp", "--dport", str(API_PORT), "-j", "DROP"],
        ["OUTPUT", "-d", pod_ip, "-p", "tcp", "--sport", str(API_PORT), "-j", "DROP"],
    ]


def active(prometheus: Prometheus) -> dict[str, dict[str, Any]]:
    """The active alerts by name (pending or firing)."""
    return {alert["labels"]["alertname"]: alert for alert in prometheus.alerts()}


def fired_since(prometheus: Prometheus, since: float) -> set[str]:
    """Every alert that was firing at some evaluation since ``since`` (time.time()), from Prometheus'
    own ALERTS series."""
    window = max(int(time.time() - since), 1)
    query = f'count by (alertname) (count_over_time(ALERTS{{alertstate="firing"}}[{window}s]))'
    result = prometheus.api(f"/api/v1/query?query={quote(query, safe='')}")["result"]
    return {series["metric"]["alertname"] for series in result}


@dataclass
class Timeline:
    pending: float  # seconds from the fault until the alert was first seen pending
    firing: float  # ... firing
    alert: dict[str, Any]  # the firing alert


def until_firing(prometheus: Prometheus, name: str, fault_at: float, timeout: float) -> Timeline:
    """Poll the alerts every 0.5 s until ``name`` fires; when it was first seen pending, and firing."""
    pending = None
    deadline = fault_at + timeout
    while time.monotonic() < deadline:
        alert = active(prometheus).get(name)
        now = time.monotonic() - fault_at
        if alert is not None and pending is None:
            pending = now
        if alert is not None and alert["state"] == "firing":
            return Timeline(pending if pending is not None else now, now, alert)
        time.sleep(0.5)
    raise AssertionError(
        f"{name} did not fire within {timeout:.0f} s; active: {sorted(active(prometheus))}\n"
        f"{prometheus.log_tail()}"
    )


def quiet(watched: Watched) -> None:
    """A healthy node: every target up, no alert pending or firing."""
    prometheus = watched.prometheus
    wait_until(lambda: len(up(prometheus)) == 2, 60, f"both targets up: {prometheus.targets()}")
    wait_until(
        lambda: not active(prometheus), 120, f"no alert active on a healthy node: {active(prometheus)}"
    )


def up(prometheus: Prometheus) -> list[dict[str, Any]]:
    return [t for t in prometheus.targets() if t["health"] == "up"]


def test_prometheus_scrapes_the_pod_as_the_service_monitor_says_and_loads_the_rules(watched: Watched) -> None:
    prometheus, cluster = watched.prometheus, watched.cluster
    quiet(watched)
    pod = watched.pod["metadata"]["name"]
    labels = sorted(
        (
            t["labels"]["endpoint"],
            t["labels"]["node"],
            t["labels"]["job"],
            t["labels"]["namespace"],
            t["labels"]["pod"],
        )
        for t in up(prometheus)
    )
    job = f"{RELEASE}-metrics"
    assert labels == [
        ("gfd-metrics", cluster.node, job, NAMESPACE, pod),
        ("nfd-metrics", cluster.node, job, NAMESPACE, pod),
    ]
    loaded = prometheus.api("/api/v1/rules?type=alert")["groups"]
    names = {r["name"] for g in loaded for r in g["rules"]}
    expected = {r["alert"] for g in watched.rules["groups"] for r in g["rules"]}
    assert names == expected and len(names) == 13, names
    # Every rule evaluates without error against the real series.
    assert [(r["name"], r.get("lastError")) for g in loaded for r in g["rules"] if r["health"] != "ok"] == []
    # The test's rules are the chart's but for `for:`, each divided by FOR_DIVISOR.
    chart = cluster.must("GET", f"{MONITORING}/prometheusrules/{RELEASE}")["spec"]["groups"]
    for chart_group, ours in zip(chart, watched.rules["groups"], strict=True):
        for chart_rule, our_rule in zip(chart_group["rules"], ours["rules"], strict=True):
            assert {k: v for k, v in chart_rule.items() if k != "for"} == {
                k: v for k, v in our_rule.items() if k != "for"
            }
            assert seconds(our_rule["for"]) == -(-seconds(chart_rule["for"]) // FOR_DIVISOR)


def test_a_failing_gpu_fires_gpu_degraded_and_it_resolves(watched: Watched) -> None:
    cluster, prometheus = watched.cluster, watched.prometheus
    bus_id = reported_bus_id(GPU)
    quiet(watched)
    began = time.time()
    failed_at = inject(cluster, f"{GPU} lost")
    fired = until_firing(prometheus, "GpuDegraded", failed_at, SLEEP + DEGRADED_FOR + 90)
    labels, annotations = fired.alert["labels"], fired.alert["annotations"]
    assert (labels["node"], labels["namespace"], labels["pod"]) == (
        cluster.node,
        NAMESPACE,
        watched.pod["metadata"]["name"],
    )
    assert labels["severity"] == "warning"
    # One alert, for the GPU that failed, by its bus address.
    assert [
        a["labels"].get("bus_id") for a in prometheus.alerts() if a["labels"]["alertname"] == "GpuDegraded"
    ] == [bus_id]
    assert (labels["bus_id"], labels["layer"], labels["error"]) == (
        bus_id,
        "hardware",
        "NVML_ERROR_GPU_IS_LOST",
    )
    assert annotations["summary"] == f"GPU {bus_id} failing on node {cluster.node} (NVML_ERROR_GPU_IS_LOST)"
    assert annotations["runbook_url"].endswith("docs/alerts.md#gpudegraded")

    healed_at = inject(cluster, f"{GPU} answers")
    wait_until(lambda: "GpuDegraded" not in active(prometheus), SLEEP + 60, "GpuDegraded resolved")
    resolved = time.monotonic() - healed_at
    assert fired_since(prometheus, began) == {"GpuDegraded"}
    print(
        f"GpuDegraded (for: {DEGRADED_FOR}s): pending {fired.pending:.1f} s and firing {fired.firing:.1f} s "
        f"after the GPU failed; resolved {resolved:.1f} s after it answered"
    )


def test_a_writer_cut_off_from_the_api_server_fires_its_alert_and_it_resolves(watched: Watched) -> None:
    cluster, prometheus = watched.cluster, watched.prometheus
    quiet(watched)
    pod_ip = the_pod(cluster, RELEASE)["status"]["podIP"]
    rules = cut_off_rules(pod_ip)
    began = time.time()
    for rule in rules:
        cluster.namespaces.run("iptables", "-I", *rule[:1], "1", *rule[1:])
    cut_at = time.monotonic()
    try:
        fired = until_firing(prometheus, "NfdLiteApiUnreachable", cut_at, BOUND + UNREACHABLE_FOR + 90)
    finally:
        for rule in rules:
            cluster.namespaces.run("iptables", "-D", *rule, check=False)
        restored_at = time.monotonic()
    labels, annotations = fired.alert["labels"], fired.alert["annotations"]
    assert (labels["node"], labels["pod"], labels["severity"]) == (
        cluster.node,
        watched.pod["metadata"]["name"],
        "critical",
    )
    assert annotations["runbook_url"].endswith("docs/alerts.md#nfdliteapiunreachable")
    wait_until(
        lambda: "NfdLiteApiUnreachable" not in active(prometheus), 90, "NfdLiteApiUnreachable resolved"
    )
    resolved = time.monotonic() - restored_at
    assert fired_since(prometheus, began) == {"NfdLiteApiUnreachable"}
    print(
        f"NfdLiteApiUnreachable (for: {UNREACHABLE_FOR}s, the writer's bound {BOUND:.0f} s): pending "
        f"{fired.pending:.1f} s and firing {fired.firing:.1f} s after the cut; resolved {resolved:.1f} s "
        "after the rules went"
    )
