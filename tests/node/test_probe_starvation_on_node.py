"""Hostile connections to nfd-lite's probe port on a real kubelet: the pod stays Ready and nfd-lite is not
restarted while 40 connections, dripping a byte every 2 s or reconnecting as soon as they are closed, come
at it from the node for 150 s: five of the chart's liveness periods (30 s, three failures restart the
container) and ten of its readiness periods (15 s, three failures mark the pod unready). Before the
probe server had one deadline per connection and gave the slots of connections still sending their
request to new ones, such connections took every slot and the kubelet restarted nfd-lite about every 90 s.

The connections come from the node's network namespace, where the kubelet's probes come from too (any
process or hostNetwork pod on a node can do the same)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hostile_clients import HostileClients
from tests.node.cluster import NodeCluster
from tests.node.release import (
    MOCK_VALUES,
    NAMESPACE,
    install,
    pod_ready,
    pod_report,
    prepare_gpu_node,
    release_pods,
    restarts,
    the_pod,
    uninstall_pruning,
)

pytestmark = pytest.mark.timeout(900)

RELEASE = "gpu-labeller-probes"
PROBE_PORT = 9401  # metrics.nfdLitePort: /healthz (liveness), /readyz (readiness) and /metrics
ATTACKERS = 40  # as many as the red team's
ATTACK = 150.0  # seconds: 5 liveness periods of 30 s, 10 readiness periods of 15 s
CHECK_EVERY = 2.0


@pytest.fixture(scope="module")
def release(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cluster = node_with_image
    tmp = tmp_path_factory.mktemp("probe-starvation")
    prepare_gpu_node(cluster)
    install(cluster, tmp, RELEASE, MOCK_VALUES)
    yield tmp
    uninstall_pruning(cluster, tmp, RELEASE)


def probe_failures(cluster: NodeCluster, pod: dict[str, Any]) -> int:
    """Probe failures the kubelet has reported for ``pod`` so far (its `Unhealthy` events, with their
    repeat counts)."""
    name = pod["metadata"]["name"]
    events = cluster.must("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    return sum(
        int(e.get("count") or 1)
        for e in events
        if e["involvedObject"].get("name") == name and e.get("reason") == "Unhealthy"
    )


@pytest.mark.parametrize("mode", ["drip", "reconnect"])
def test_the_pod_stays_ready_and_is_not_restarted_under_hostile_connections(
    node_with_image: NodeCluster, release: Path, mode: str
) -> None:
    cluster = node_with_image
    pod = the_pod(cluster, RELEASE)
    restarted = restarts(pod, "nfd-lite")
    failures = probe_failures(cluster, pod)
    unready: list[float] = []
    attack = HostileClients(
        pod["status"]["podIP"],
        PROBE_PORT,
        mode,
        connections=ATTACKERS,
        seconds=ATTACK + 60,  # ended by the with block; the margin only bounds a process left behind
        prefix=cluster.namespaces.enter,
    )
    with attack:
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < ATTACK:
            assert attack.process.poll() is None, (
                f"the hostile clients ended early: {attack.process.returncode}"
            )
            pods = release_pods(cluster, RELEASE)
            if (
                len(pods) != 1
                or pods[0]["metadata"]["uid"] != pod["metadata"]["uid"]
                or not pod_ready(pods[0])
            ):
                unready.append(elapsed)
            time.sleep(CHECK_EVERY)
    after = the_pod(cluster, RELEASE)
    seen = {
        "restarts": restarts(after, "nfd-lite") - restarted,
        "probe failures": probe_failures(cluster, after) - failures,
        "unready at (s)": [round(t) for t in unready],
        "pod replaced": after["metadata"]["uid"] != pod["metadata"]["uid"],
    }
    report = f"under {ATTACKERS} {mode} connections ({attack.stats}): {seen}\n{pod_report(cluster, RELEASE)}"
    assert seen == {"restarts": 0, "probe failures": 0, "unready at (s)": [], "pod replaced": False}, report
    # The attack reached the pod all along: connections opened, and closed by nfd-lite at their deadline.
    assert attack.stats["opened"] > ATTACKERS and attack.stats["closed_by_server"] > 0, report
