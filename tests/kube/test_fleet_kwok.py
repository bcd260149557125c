"""A small simulated fleet on the real control plane (tests/kube/fleet.py): tens of Nodes kept Ready by kwok,
with the node-lifecycle controller watching their Leases as in a cluster, and a few real writers on each
side: nfd-lite with the chart's arguments, nfd-worker with one nfd-master. Each writer runs as its pod
runs it (a token of a Pod bound to its own Node). What is asserted is read at the server: labels on the
Nodes, and the audit log's record of every request and of every Node write's body.

The control plane is this module's own: one test restarts its API server."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.support.chart import nfd_lite_args, nfd_lite_env
from benchmarks.support.watches import Watches, calibrate
from tests.kube.controlplane import ControlPlane
from tests.kube.fixtures import apply_rbac
from tests.kube.fleet import (
    LABEL_WRITES_AUDIT,
    LITE_USER,
    MASTER_USER,
    WORKER_USER,
    AuditLog,
    Fleet,
    LabelWatch,
    features,
)
from tests.kube.process import LoggedProcess
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(900)

SIZE = 24  # Nodes in the fleet
PER_SIDE = 3  # writers of each side
# As the node-lifecycle controller has it (--node-monitor-grace-period): a Node whose Lease is not renewed
# for this long is marked NotReady.
GRACE = 50.0
LABEL_TIMEOUT = 180.0  # generous: a loaded 2-core machine starts Python interpreters slowly
CHECK_INTERVAL = 300.0  # nfd-lite's --admission-check-interval default: its only periodic requests
PROFILE = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.family": "hopper",
}
EXTRA = {"feature.node.kubernetes.io/fleet-extra": "true"}  # another writer's file, in features.d
KEY = "nvidia.com/gpu.machine"  # the label a change rewrites


def text(labels: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in labels.items())


@dataclass
class Side:
    nodes: list[str]
    processes: list[LoggedProcess]
    gfd_dirs: list[Path]  # where each writer's gfd file is


@dataclass
class Running:
    kube: ControlPlane
    fleet: Fleet
    watch: LabelWatch
    audit: AuditLog
    lite: Side
    nfd: Side
    ready_at: float  # when every Node of the fleet was first Ready (epoch seconds)
    started: float  # when the writers were started
    labelled: float  # when every writer's Node carried its labels

    def labels_of(self, round_: str) -> dict[str, str]:
        return PROFILE | EXTRA | {KEY: round_}


def _lay_out(home: Path, lite: bool, value: str) -> tuple[Path, list[Path]]:
    """A node's files: (the directory gfd writes, the writer's directories); nfd-lite reads the chart's
    two (source.d, where gfd writes, and features.d), nfd-worker its one features.d."""
    source, extra = home / "source.d", home / "features.d"
    gfd_dir = source if lite else extra
    features(gfd_dir, text(PROFILE | {KEY: value}))
    features(extra, text(EXTRA), "extra")
    return gfd_dir, [source, extra] if lite else [extra]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    workdir = tmp_path_factory.mktemp("fleet")
    workdir.chmod(0o755)
    plane = ControlPlane(
        workdir / "kube", controllers=("node-lifecycle-controller",), audit_rules=LABEL_WRITES_AUDIT
    )
    with plane as kube:
        apply_rbac(kube)
        with Fleet(kube, workdir / "fleet", SIZE) as fleet, LabelWatch(kube, fleet.name) as watch:
            ready_at = time.time()
            fleet.start_master(fleet.nodes[0]).wait_healthy(120)
            lite_nodes = fleet.nodes[1 : 1 + PER_SIDE]
            nfd_nodes = fleet.nodes[1 + PER_SIDE : 1 + 2 * PER_SIDE]
            lite, nfd = Side(lite_nodes, [], []), Side(nfd_nodes, [], [])
            for node in lite_nodes:
                gfd_dir, dirs = _lay_out(workdir / "files" / node, True, "start")
                argv = [sys.executable, "-m", "nfd_lite", *nfd_lite_args(dirs)]
                lite.processes.append(fleet.prepare_lite(node, argv, nfd_lite_env(node)))
                lite.gfd_dirs.append(gfd_dir)
            for node in nfd_nodes:
                gfd_dir, dirs = _lay_out(workdir / "files" / node, False, "start")
                nfd.processes.append(fleet.prepare_worker(node, dirs[0]))
                nfd.gfd_dirs.append(gfd_dir)
            started = fleet.start_writers([*lite.processes, *nfd.processes])
            want = PROFILE | EXTRA | {KEY: "start"}
            missing = watch.wait(lite_nodes + nfd_nodes, want, LABEL_TIMEOUT)
            logs = "\n".join(f"{p.log}: {p.output()[-800:]}" for p in [*lite.processes, *nfd.processes])
            assert not missing, f"not labelled after {LABEL_TIMEOUT:.0f} s: {missing}\n{logs}"
            yield Running(
                kube, fleet, watch, AuditLog(kube.audit_log), lite, nfd, ready_at, started, time.time()
            )


def test_every_writers_node_is_labelled_and_kwok_keeps_the_fleet_ready(running: Running) -> None:
    want = PROFILE | EXTRA | {KEY: "start"}
    for node in running.lite.nodes + running.nfd.nodes:
        assert {k: running.watch.labels[node].get(k) for k in want} == want, node
    # Past the node-lifecycle controller's grace period since the fleet was Ready: a Node whose Lease kwok
    # had stopped renewing would now be NotReady.
    time.sleep(max(0.0, running.ready_at + GRACE + 15 - time.time()))
    assert running.fleet.not_ready() == []
    ages = running.fleet.lease_ages()
    assert sorted(ages) == sorted(running.fleet.nodes)
    assert max(ages.values()) < running.fleet.lease_seconds, ages
    for listed in running.fleet.list_nodes():
        # The node-lifecycle controller taints a Node it finds unreachable or not ready.
        taints = [t["key"] for t in listed["spec"].get("taints") or []]
        unhealthy = [t for t in taints if t.startswith("node.kubernetes.io/")]
        assert not unhealthy, (listed["metadata"]["name"], unhealthy)


def test_steady_state_makes_no_request_from_our_writers(running: Running) -> None:
    """Nothing changing: no request by nfd-lite at all (its watches aside) over a window that ends before
    its first periodic admission check is due."""
    begin = max(time.time(), running.labelled + 5)  # the start's last requests are answered
    end = begin + 30
    assert end < running.started + CHECK_INTERVAL - 10, "the fleet took too long to start to measure"
    time.sleep(end - time.time() + 2)  # the audit log has everything received before ``end``
    window = running.audit.between(begin, end, [LITE_USER])
    assert [(r.verb, r.resource, r.node) for r in window if r.verb != "watch"] == []


def test_the_benchmarks_simulated_watches_ask_what_every_writer_asks(running: Running) -> None:
    """fleet-scale's server memory per watch comes from simulated own-Node watches: each must be the
    request a real writer makes (but for its Node and resourceVersion), and the server must hold it open."""
    writers = [r for r in running.audit.read() if r.user == LITE_USER and r.verb == "watch"]
    assert {r.node for r in writers} == set(running.lite.nodes)
    for request in writers:
        calibrate(request.uri)
    nodes = running.nfd.nodes  # Nodes no writer of ours watches
    rv = running.kube.request("GET", "/api/v1/nodes?limit=1").json()["metadata"]["resourceVersion"]
    opened = time.time()
    with Watches(running.kube) as watches:
        watches.open(nodes, rv, timeout=60)
        assert watches.count == len(nodes)

        def simulated() -> list[str]:
            found = running.audit.between(opened - 1, users=["admin"])
            return sorted(r.uri for r in found if r.verb == "watch" and "metadata.name" in r.uri)

        assert eventually(lambda: len(simulated()) == len(nodes), timeout=30, interval=0.5), simulated()
        for uri in simulated():
            calibrate(uri)
        time.sleep(2)
        assert watches.ended == 0


def test_after_compaction_and_an_api_server_restart_every_node_keeps_its_labels_and_none_is_removed(
    running: Running,
) -> None:
    kube, watch = running.kube, running.watch
    nodes = running.lite.nodes + running.nfd.nodes
    listed = watch.lists
    # etcd compacted first: no watch can resume from a resourceVersion it had, so every one is answered
    # 410 Gone and its writer lists its Node again, as after a long outage.
    kube.compact()
    restarted = time.time()
    kube.restart_apiserver()
    # The fleet's Nodes as listed after the restart: every writer's labels still there.
    assert eventually(lambda: watch.lists > listed, 120), "the watch never listed the Nodes again"
    assert watch.wait(nodes, PROFILE | EXTRA | {KEY: "start"}, 60) == []
    # The writers reconnect: a change made after the restart reaches every Node.
    for directory in running.lite.gfd_dirs + running.nfd.gfd_dirs:
        features(directory, text(PROFILE | {KEY: "after-restart"}))
    want = PROFILE | EXTRA | {KEY: "after-restart"}
    missing = watch.wait(nodes, want, LABEL_TIMEOUT)
    assert not missing, f"the change after the restart did not reach {missing}"
    relisted = {r.node for r in running.audit.between(restarted, users=[LITE_USER]) if r.verb == "list"}
    assert relisted >= set(running.lite.nodes), (
        "a writer resumed no watch after the compaction, yet did not list"
    )
    assert running.fleet.not_ready() == []
    # Through the whole run, the start and the restart included, nfd-lite removed no label: every Node
    # write of its (dry runs aside) is in the audit log with its body.
    requests = running.audit.read()
    writes = [r for r in requests if r.user == LITE_USER and r.write and r.resource == "nodes"]
    assert writes, "no write of nfd-lite in the audit log"
    assert [(r.node, r.removed) for r in writes if r.removed] == []
    # And each writer wrote only to its own Node (the probe on another Node is a dry run).
    assert {r.name for r in writes} == {r.node for r in writes} == set(running.lite.nodes)
    nfd_writes = [r for r in requests if r.user in (WORKER_USER, MASTER_USER) and r.write]
    assert nfd_writes, "NFD's writes are missing from the audit log"
