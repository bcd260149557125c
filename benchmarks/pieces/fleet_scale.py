"""fleet-scale: a simulated fleet on the real kube-apiserver, many real writers of each side, and what the
server saw.

    python -m benchmarks.pieces.fleet_scale --nodes 1000 --writers 300 [--steady-window 300]

(as root, from the repository root). kwok (tests/kube/fleet.py) keeps ``--nodes`` Nodes Ready as their
kubelets would: status, a Lease renewed every ``--lease-seconds``/4 (10 s at the kubelet's default 40 s),
the pods bound to them Running; the node-lifecycle controller watches those Leases, as in a cluster. On
``--writers`` of the Nodes the product runs as the image installs it with the chart's arguments
(benchmarks/support/chart.py), each writer as its pod runs it (a token of a Pod bound to its own Node, a
user of its own); on as many other Nodes upstream NFD's nfd-worker runs, with one nfd-master on a Node of
its own, started before and warm. Each side is a round of its own on fresh Nodes, one side at a time, the
one going first swapping every round (``--rounds``):

- rollout: every writer of the side started at once; the clock stops when every one of its Nodes carries
  both files' labels, seen through a watch. Requests are counted at the server from its audit log until 5 s
  after that, per writer by the Node its pod-bound token names; NFD's side is the worker's plus its share
  of the master's (the master's requests in the window / the writers). The server's CPU, its API Priority
  and Fairness figures (``apiserver_flowcontrol_*``: the writers' service accounts share the
  ``workload-low`` priority level) and its PATCH latency on Nodes, from its /metrics, over the same window.
- steady state: nothing changing, the next ``--steady-window`` seconds (300 s by default: five of
  nfd-worker's 60 s rescans; nfd-lite's repeated admission self-check is shared out over the fleet, each
  writer about every 300 s x the Nodes, at most daily): requests per 1,000 Nodes per hour, writes, the
  busiest second (a herd shows there), the server's CPU and its memory with the side's writers running.
  Before the first round, 60 s of the fleet alone give the server's own background, which every figure of
  the server includes.
- churn (``--churn-window``): one label changed on 1% of the side's Nodes a minute, each Node once:
  requests and writes per 1,000 Nodes per hour, and each change's time from its file to its Node.
- a rolling restart: every writer of the side stopped and started again 10% at a time, each wave once the
  last is up, as a DaemonSet's update does (NFD: its nfd-master restarted first): time, requests and
  writes per writer, labels removed.
- kube-apiserver killed and started again, then a label changed on every Node of the side: until the last
  Node has it, requests per writer, the busiest second, failures, labels removed.

After the rounds, on the Nodes they left, each side's *rolling start*: as many writers as a round had, on
fresh Nodes, started 10% at a time, each wave once the last wave's Nodes are labelled (a DaemonSet rolled
out with ``maxUnavailable: 10%``): time, each wave's time, requests per writer. Then, every writer stopped,
the server's cost per own-Node watch: simulated watches (benchmarks/support/watches.py, each the request a
real writer made, checked against its audit-log record) on up to 5,000 Nodes, none, half, then all open,
and the server's live heap and goroutine stacks right after forced collections, its goroutines and RSS.

Every label removed by either side's writes (their bodies are in the audit log) is counted too. The
figures are one run's; on 2 cores the rollout is CPU-bound (N interpreters, or N Go programs, starting at
once beside the server), which the requests per writer are not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks.support.chart import nfd_lite_args, nfd_lite_env
from benchmarks.support.install import Installed, install
from benchmarks.support.measure import Figure, markdown
from benchmarks.support.watches import calibrate, per_thousand, watch_cost
from tests.kube.controlplane import ControlPlane
from tests.kube.fixtures import apply_rbac
from tests.kube.fleet import (
    KWOK_USER,
    LABEL_WRITES_AUDIT,
    LITE_USER,
    MASTER_USER,
    WORKER_USER,
    AuditLog,
    Fleet,
    LabelWatch,
    Request,
    Sample,
    etcd_db_bytes,
    features,
    metrics,
    process_usage,
    total,
)
from tests.kube.process import LoggedProcess

PROFILE = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/cuda.driver-version.full": "550.54.15",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/mig.capable": "true",
}
EXTRA = {"feature.node.kubernetes.io/fleet-extra": "true"}  # another writer's file, in features.d
WANT = PROFILE | EXTRA
BASELINE = 60.0  # seconds of the fleet alone measured before the first round
SETTLE = 5.0  # seconds after the last Node got its labels that still carry the start's tail
LABEL_TIMEOUT = 1200.0
SIDES = ("lite", "nfd")
USERS = {"lite": {LITE_USER}, "nfd": {WORKER_USER, MASTER_USER}}
PRIORITY = "workload-low"  # where API Priority and Fairness puts service accounts' requests
CHURN_KEY = "nvidia.com/gpu.fleet-churn"  # the label the churn changes, on 1% of the Nodes a minute
CHURN_SHARE, CHURN_PERIOD = 0.01, 60.0
RESTART_KEY = "nvidia.com/gpu.fleet-restart"  # changed on every Node right after the API server restarts
MIN_START = 10  # fewer fresh Nodes left than this for the rolling start: it is left out
MAX_WATCHES = 5000  # simulated watches, one per Node, at most
WAVE = 0.1  # a rolling restart replaces this share of the writers at a time (maxUnavailable: 10%)
# A restarted writer is up once it made the last request of its start: our watch; nfd-worker's read of its
# NodeFeature (it rewrites it only when it changed).
STARTED = {"lite": ("watch", "nodes"), "nfd": ("get", "nodefeatures")}


def _text(labels: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in labels.items())


@dataclass
class Server:
    """The server's own figures at one moment."""

    at: float
    cpu_s: float
    rss_mib: float
    samples: list[Sample]

    @classmethod
    def read(cls, kube: ControlPlane) -> Server:
        cpu, rss, _ = process_usage(kube.apiserver.pid)
        return cls(time.time(), cpu, rss, metrics(kube))

    def delta(self, later: Server, name: str, **labels: str) -> float:
        return total(later.samples, name, **labels) - total(self.samples, name, **labels)


def _wait_ms(before: Server, after: Server) -> float:
    """Mean time a request of the writers' priority level waited in API Priority and Fairness's queues."""
    name = "apiserver_flowcontrol_request_wait_duration_seconds"
    count = before.delta(after, f"{name}_count", priority_level=PRIORITY)
    return 1000 * before.delta(after, f"{name}_sum", priority_level=PRIORITY) / count if count else 0.0


def _patch_ms(before: Server, after: Server, dry_run: str) -> tuple[float, float]:
    """Mean and 99th percentile latency of PATCHes of Nodes (not their status; ``dry_run`` "All" or "",
    a real write), as the server measured them; the percentile is its histogram's bucket bound."""
    name = "apiserver_request_duration_seconds"
    labels = {"verb": "PATCH", "resource": "nodes", "subresource": "", "dry_run": dry_run}
    count = before.delta(after, f"{name}_count", **labels)
    if not count:
        return 0.0, 0.0
    mean = 1000 * before.delta(after, f"{name}_sum", **labels) / count
    bounds = {dict(have)["le"] for metric, have, _ in after.samples if metric == f"{name}_bucket"}
    for le in sorted(bounds, key=float):
        if before.delta(after, f"{name}_bucket", **labels, le=le) >= 0.99 * count:
            return mean, 1000 * float(le)
    return mean, math.inf


def _requests_per_writer(window: list[Request], nodes: list[str]) -> tuple[list[float], float]:
    """Each of ``nodes``' writer's requests in ``window`` (by the Node its pod-bound token names) plus its
    share of nfd-master's, and that share (0 for ours, which has no master)."""
    per_node = Counter(r.node for r in window if r.user != MASTER_USER)
    master_share = sum(1 for r in window if r.user == MASTER_USER) / len(nodes)
    return [per_node[n] + master_share for n in nodes], master_share


def _busiest_second(requests: list[Request]) -> int:
    return max(Counter(math.floor(r.at) for r in requests).values(), default=0)


def _kinds(requests: list[Request], writers: int) -> str:
    """Each kind of request per writer: ``verb resource[ dry-run]``."""
    counts = Counter(f"{r.verb} {r.resource}{' dry-run' if r.dry_run else ''}" for r in requests)
    return ", ".join(f"{kind} {n / writers:.2g}" for kind, n in counts.most_common())


class Run:
    """One control plane, one fleet, one warm nfd-master; the sides' rounds on fresh Nodes."""

    def __init__(self, installed: Installed, workdir: Path, fleet: Fleet, kube: ControlPlane) -> None:
        self.installed = installed
        self.workdir = workdir
        self.fleet = fleet
        self.kube = kube
        self.audit = AuditLog(kube.audit_log)
        self.watch = LabelWatch(kube, fleet.name)
        self.free = list(fleet.nodes[1:])  # nodes[0] is the master's
        self.changed: dict[str, dict[str, str]] = {}  # node -> labels the phases added to its GPU file
        self.master = fleet.start_master(fleet.nodes[0])
        self.master.wait_healthy(300)

    def take(self, count: int) -> list[str]:
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def prepare(self, side: str, node: str) -> LoggedProcess:
        home = self.workdir / "files" / node
        source, extra = home / "source.d", home / "features.d"
        features(source if side == "lite" else extra, _text(PROFILE))
        features(extra, _text(EXTRA), "extra")
        if side == "nfd":
            return self.fleet.prepare_worker(node, extra, uid=self.fleet.uid())
        argv = [str(self.installed.nfd_lite), *nfd_lite_args([source, extra])]
        env = self.installed.env({**os.environ}) | nfd_lite_env(node)
        return self.fleet.prepare_lite(node, argv, env, uid=self.fleet.uid())

    def _change(self, side: str, node: str, key: str, value: str) -> tuple[str, str, str, float]:
        """Rewrite the node's GPU label file (gfd's source.d for ours, features.d for nfd-worker) with
        ``key`` set, keeping every earlier change (a key left out would be a label removed); returns the
        change and when it was written."""
        self.changed.setdefault(node, {})[key] = value
        directory = self.workdir / "files" / node / ("source.d" if side == "lite" else "features.d")
        features(directory, _text(PROFILE | self.changed[node]))
        return node, key, value, time.time()

    def _landed(self, changes: list[tuple[str, str, str, float]], timeout: float) -> list[float]:
        """Seconds from each (node, key, value, written at) to the watch seeing it; waits for them all."""
        deadline = time.monotonic() + timeout
        while True:
            with self.watch.cond:
                seen = [self.watch.seen.get((node, key, value)) for node, key, value, _ in changes]
                if None not in seen:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{seen.count(None)} of {len(changes)} changes never reached their Node"
                    )
                self.watch.cond.wait(1.0)
        return [float(t) - at for t, (_, _, _, at) in zip(seen, changes, strict=True)]

    def churn(self, side: str, nodes: list[str], window: float) -> dict[str, float | str]:
        """One label changed on 1% of the Nodes every minute (each Node once), for ``window`` seconds:
        the side's requests and writes over it, and how long each change took to reach its Node."""
        users, per_round = USERS[side], max(1, round(len(nodes) * CHURN_SHARE))
        order = random.Random(len(nodes)).sample(nodes, len(nodes))
        began, changes = time.time(), []
        rounds = max(1, int(window // CHURN_PERIOD))
        for i in range(rounds):
            time.sleep(max(0.0, began + i * CHURN_PERIOD - time.time()))
            for node in order[i * per_round : (i + 1) * per_round]:
                changes.append(self._change(side, node, CHURN_KEY, f"c{i}"))
        end = began + rounds * CHURN_PERIOD
        time.sleep(max(0.0, end - time.time()))
        latency = self._landed(changes, 300)
        requests = self.audit.between(began, end, users)
        per_hour = 1000 / len(nodes) * 3600 / (end - began)
        return {
            "churn_per_1000_hour": len(requests) * per_hour,
            "churn_writes_per_1000_hour": sum(r.write for r in requests) * per_hour,
            "churn_latency_s": statistics.median(latency),
            "churn_latency_max_s": max(latency),
        }

    def api_restart(self, side: str, nodes: list[str]) -> dict[str, float | str]:
        """kube-apiserver killed and started again, then a label changed on every Node of the side: how
        long until every Node has it, how the writers came back (requests per writer, the busiest
        second), and whether any label was removed."""
        users = USERS[side]
        killed = time.time()
        self.kube.restart_apiserver()
        back = time.time()
        changes = [self._change(side, node, RESTART_KEY, "after") for node in nodes]
        latency = self._landed(changes, LABEL_TIMEOUT)
        done = max(at + seconds for (_, _, _, at), seconds in zip(changes, latency, strict=True))
        time.sleep(SETTLE)
        window = self.audit.between(killed, done + SETTLE, users)
        return {
            "restart_down_s": back - killed,
            "restart_change_s": done - back,
            "restart_requests": len(window) / len(nodes),
            "restart_busiest": _busiest_second(window),
            "restart_failed": sum(1 for r in window if r.code >= 500 or r.code == 429),
            "restart_removed": sum(1 for r in window if r.removed),
        }

    def rolling_restart(
        self, side: str, nodes: list[str], processes: list[LoggedProcess]
    ) -> dict[str, float | str]:
        """Every writer of the side restarted as a DaemonSet rolls out a new version, 10% at a time, each
        wave once the last is up (NFD: its nfd-master restarted first, as its Deployment's update does):
        time, requests and writes per writer, labels removed."""
        users, (verb, resource) = USERS[side], STARTED[side]
        began = time.time()
        if side == "nfd":
            self.master.stop()
            self.master.start()
            self.master.wait_healthy(300)
        wave = max(1, math.ceil(len(processes) * WAVE))
        pairs = list(zip(nodes, processes, strict=True))
        for i in range(0, len(pairs), wave):
            batch = pairs[i : i + wave]
            self.fleet.stop_writers(p for _, p in batch)
            started = time.time()
            for _, process in batch:
                process.start()
            deadline = time.monotonic() + 300
            while True:
                up = {
                    r.node
                    for r in self.audit.between(started, users=users)
                    if (r.verb, r.resource) == (verb, resource)
                }
                if all(node in up for node, _ in batch):
                    break
                if ended := next((p for _, p in batch if not p.running()), None):
                    raise RuntimeError(f"{side}: a restarted writer exited (log {ended.log})")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side}: a wave of restarted writers did not come up in 300 s")
                time.sleep(0.5)
        done = time.time()
        time.sleep(SETTLE)
        window = self.audit.between(began, done + SETTLE, users)
        return {
            "rolling_s": done - began,
            "rolling_requests": len(window) / len(nodes),
            "rolling_writes": sum(r.write for r in window) / len(nodes),
            "rolling_removed": sum(1 for r in window if r.removed),
        }

    def _labelled(self, side: str, nodes: list[str], processes: list[LoggedProcess]) -> list[float]:
        """Waits until every one of ``nodes`` carries both files' labels; when each first did."""
        deadline = time.monotonic() + LABEL_TIMEOUT
        while self.watch.wait(nodes, WANT, 1.0):  # a second at a time: a writer that exited ends the wait
            if ended := next((p for p in processes if not p.running()), None):
                raise RuntimeError(f"{side}: a writer exited (log {ended.log})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side} x{len(nodes)}: not every Node labelled in {LABEL_TIMEOUT:.0f} s")
        return [self.watch.labelled_at(node, WANT) or time.time() for node in nodes]

    def rolling_start(self, side: str, count: int) -> dict[str, float | str]:
        """The side started on ``count`` fresh Nodes 10% at a time, each wave once the last wave's Nodes
        are labelled (a DaemonSet rolled out over Nodes new to it with ``maxUnavailable: 10%``, or Nodes
        joining a few dozen at a time): no wave competes with another for the CPU, so each wave's time is
        a start's time on a machine that is not starved. Time, each wave's, requests per writer."""
        nodes = self.take(count)
        processes = [self.prepare(side, node) for node in nodes]
        users, wave = USERS[side], max(1, math.ceil(count * WAVE))
        waves: list[float] = []
        began = time.time()
        try:
            for i in range(0, count, wave):
                started = self.fleet.start_writers(processes[i : i + wave])
                waves.append(
                    max(self._labelled(side, nodes[i : i + wave], processes[i : i + wave])) - started
                )
            done = time.time()
            time.sleep(SETTLE)
        finally:
            self.fleet.stop_writers(processes)
        window = self.audit.between(began - 1, done + SETTLE, users)
        return {
            "start_s": done - began,
            "start_wave_s": statistics.median(waves),
            "start_wave_max_s": max(waves),
            "start_requests": statistics.median(_requests_per_writer(window, nodes)[0]),
            "start_removed": sum(1 for r in window if r.removed),
        }

    def round(self, side: str, writers: int, steady: float, churn: float) -> dict[str, float | str]:
        nodes = self.take(writers)
        processes = [self.prepare(side, node) for node in nodes]  # tokens issued first: all start at once
        users = USERS[side]
        idle = Server.read(self.kube)  # the fleet alone (and the warm master), for the memory figure
        master_cpu = process_usage(self.master.pid)[0]
        started = self.fleet.start_writers(processes)
        try:
            labelled = self._labelled(side, nodes, processes)
            done = max(labelled)
            time.sleep(SETTLE)
            after_rollout = Server.read(self.kube)
            master_cpu = process_usage(self.master.pid)[0] - master_cpu
            steady_from = time.time()
            time.sleep(steady)
            after_steady = Server.read(self.kube)
            writer_rss = [process_usage(p.pid)[2] for p in processes]
            faults = self.churn(side, nodes, churn) if churn > 0 else {}
            faults |= self.rolling_restart(side, nodes, processes)
            faults |= self.api_restart(side, nodes)
        finally:
            self.fleet.stop_writers(processes)
        rollout = self.audit.between(started - 1, done + SETTLE, users)
        window = self.audit.between(steady_from, steady_from + steady, users)
        per_writer, master_share = _requests_per_writer(rollout, nodes)
        removed = [r for r in self.audit.between(started - 1, time.time(), users) if r.removed]
        hours = steady / 3600
        return {
            "time_s": done - started,
            "p50_s": statistics.median(labelled) - started,
            "requests": statistics.median(per_writer),
            "requests_max": max(per_writer),
            "master_share": master_share,
            "busiest": _busiest_second(rollout),
            "wait_ms": _wait_ms(idle, after_rollout),
            "rejected": idle.delta(after_rollout, "apiserver_flowcontrol_rejected_requests_total"),
            "patch_ms": _patch_ms(idle, after_rollout, "")[0],
            "patch_p99_ms": _patch_ms(idle, after_rollout, "")[1],
            "dry_ms": _patch_ms(idle, after_rollout, "All")[0],
            "failed": sum(1 for r in rollout if r.code >= 500 or r.code == 429),
            "conflicts": sum(1 for r in rollout if r.code == 409),
            "server_cpu_ms": 1000 * (after_rollout.cpu_s - idle.cpu_s) / writers,
            "master_cpu_ms": 1000 * master_cpu / writers,
            "steady_per_1000_hour": len(window) / writers * 1000 / hours if steady else 0.0,
            "steady_writes_per_1000_hour": sum(r.write for r in window) / writers * 1000 / hours
            if steady
            else 0.0,
            "steady_busiest": _busiest_second(window),
            "steady_server_cpu_pct": 100 * (after_steady.cpu_s - after_rollout.cpu_s) / max(steady, 1e-9),
            "server_rss_mib": after_steady.rss_mib,
            "idle_rss_mib": idle.rss_mib,
            "writer_rss_mib": statistics.fmean(writer_rss),
            "removed": len(removed),
            "rollout_kinds": _kinds([r for r in rollout if r.user != MASTER_USER], writers),
            "steady_kinds": _kinds(window, writers),
            **faults,
        }


def figures(
    installed: Installed,
    *,
    nodes: int = 1000,
    writers: int = 300,
    steady: float = 300.0,
    churn: float = 180.0,
    rounds: int = 1,
    lease_seconds: int = 40,
) -> list[Figure]:
    # The rolling start's fresh Nodes, per side: what the rounds leave, up to as many as the rounds had.
    starting = min(writers, (nodes - 1 - 2 * rounds * writers) // 2)
    if 2 * rounds * writers + 1 > nodes:
        raise ValueError(
            f"fleet-scale: --nodes {nodes} is too few for {rounds} round(s) of {writers} writers per side "
            f"on fresh Nodes: at least {2 * rounds * writers + 1}"
        )
    if os.geteuid() != 0:
        raise PermissionError(
            "fleet-scale runs the writers in mount namespaces as users of their own: run as root"
        )
    workdir = Path(tempfile.mkdtemp(prefix="fleet-scale-"))
    workdir.chmod(0o755)
    began = time.monotonic()
    results: dict[str, list[dict[str, float | str]]] = {side: [] for side in SIDES}
    try:
        plane = ControlPlane(
            workdir / "kube",
            controllers=("node-lifecycle-controller",),
            audit_rules=LABEL_WRITES_AUDIT,
            profiling=True,  # the simulated watches' cost is read from the heap right after a collection
        )
        with plane as kube:
            apply_rbac(kube)
            fleet = Fleet(kube, workdir / "fleet", nodes, lease_seconds=lease_seconds, ready_timeout=1800)
            with fleet:
                ready_s = time.monotonic() - began
                run = Run(installed, workdir, fleet, kube)
                try:
                    # The fleet alone (kwok, the node-lifecycle controller, the warm master): the server's
                    # own background, which every later figure of the server includes.
                    quiet = Server.read(kube)
                    time.sleep(BASELINE)
                    alone = Server.read(kube)
                    for i in range(rounds):
                        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                            print(f"fleet-scale: round {i + 1}, {side}, {writers} writers", file=sys.stderr)
                            results[side].append(run.round(side, writers, steady, churn))
                    for side in SIDES if starting >= MIN_START else ():
                        print(f"fleet-scale: {side}, rolling start of {starting} writers", file=sys.stderr)
                        results[side][-1] |= run.rolling_start(side, starting)
                    # The server's cost per watch, from simulated ones (after a real writer's is checked to be
                    # the same request), one per Node, with every writer stopped.
                    calibrate(
                        next(r.uri for r in run.audit.read() if r.user == LITE_USER and r.verb == "watch")
                    )
                    print(
                        f"fleet-scale: simulated watches on {min(nodes, MAX_WATCHES)} Nodes", file=sys.stderr
                    )
                    held = watch_cost(kube, fleet.nodes[:MAX_WATCHES])
                    not_ready = len(fleet.not_ready())
                    etcd_mib = etcd_db_bytes(kube) / 2**20
                    server = Server.read(kube)
                    master_rss = process_usage(run.master.pid)[2]
                finally:
                    run.watch.close()
    except BaseException:
        print(f"fleet-scale: logs kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    # Every figure as measured, before any is formatted: a run of an hour is not lost to a table's mistake.
    print(
        f"fleet-scale: measured: {json.dumps({'sides': results, 'held': [vars(r) for r in held]})}",
        file=sys.stderr,
    )
    ours, theirs = results["lite"], results["nfd"]
    live, goroutines, rss = per_thousand(held)
    readings = "; ".join(
        f"{r.watches:,}: {r.live_mib:.0f} MiB, {r.goroutines:,.0f}, {r.rss_mib:.0f} MiB" for r in held
    )
    span = alone.at - quiet.at
    alone_cpu = 100 * (alone.cpu_s - quiet.cpu_s) / span
    kwok_rate = quiet.delta(alone, "apiserver_flowcontrol_dispatched_requests_total", flow_schema=KWOK_USER)
    kwok_rate /= span
    last_ours, last_theirs = ours[-1], theirs[-1]
    idle_rss = ", ".join(f"{float(r['idle_rss_mib']):.0f}" for r in ours + theirs)

    def values(side: list[dict[str, float | str]], key: str) -> list[float]:
        return [float(r[key]) for r in side]

    note = (
        f"fleet-scale: {nodes:,} Nodes kept Ready by kwok (Leases of {lease_seconds} s: "
        f"{kwok_rate:.0f} requests/s of its own, exempt from API Priority and Fairness); the fleet alone "
        f"(with the warm nfd-master) costs kube-apiserver {alone_cpu:.0f}% of a core and it holds "
        f"{alone.rss_mib:.0f} MiB; "
        f"{writers} real writers per side, {rounds} round(s) each on fresh Nodes; fleet created and Ready in "
        f"{ready_s:.0f} s, the whole run {time.monotonic() - began:.0f} s. NFD: nfd-worker + its share of "
        f"nfd-master ({last_theirs['master_share']:.2f} requests per writer at the rollout; master CPU "
        f"{last_theirs['master_cpu_ms']:.1f} ms per writer, peak RSS {master_rss:.0f} MiB). nfd-lite's "
        f"dry-run PATCHes (the self-check) at the rollout: {last_ours['dry_ms']:.0f} ms mean. Requests per "
        f"writer at the rollout, last round: nfd-lite {last_ours['rollout_kinds']}; nfd-worker "
        f"{last_theirs['rollout_kinds']}. In steady state: nfd-lite {last_ours['steady_kinds'] or 'none'}; "
        f"NFD {last_theirs['steady_kinds'] or 'none'}. kube-apiserver RSS with the fleet alone before each "
        f"round: {idle_rss} MiB (one reading of a Go heap, which its collector moves by hundreds of MiB). "
        f"At the end: {not_ready} Nodes not Ready, etcd's database {etcd_mib:.0f} MiB, kube-apiserver RSS "
        f"{server.rss_mib:.0f} MiB. Simulated watches (watches: live heap and stacks, goroutines, RSS): "
        f"{readings}."
    )
    rows = [  # key, what, unit, digits
        ("time_s", "rollout, all started at once: time until every Node is labelled", "s", 1),
        ("p50_s", "the same: time until half the Nodes are labelled", "s", 1),
        ("requests", "the same: requests per writer from start to labelled (median)", "", 1),
        ("requests_max", "the same: requests per writer, the most", "", 1),
        ("busiest", "the same: busiest second at the server", "req/s", 0),
        ("wait_ms", f"the same: mean wait in API Priority and Fairness ({PRIORITY})", "ms", 1),
        ("rejected", "the same: requests rejected by API Priority and Fairness", "", 0),
        ("patch_ms", "the same: Node PATCHes (writes) at the server, mean latency", "ms", 0),
        ("patch_p99_ms", "the same: Node PATCHes (writes), 99th percentile (histogram bound)", "ms", 0),
        ("failed", "the same: requests failed (5xx, 429)", "", 0),
        ("conflicts", "the same: requests refused as conflicts (409, retried)", "", 0),
        ("server_cpu_ms", "the same: kube-apiserver CPU per writer", "ms", 0),
        ("writer_rss_mib", "peak RSS per writer (mean)", "MiB", 1),
        ("steady_per_1000_hour", f"steady state ({steady:g} s): requests per 1,000 Nodes per hour", "", 0),
        ("steady_writes_per_1000_hour", "steady state: writes per 1,000 Nodes per hour", "", 0),
        ("steady_busiest", "steady state: busiest second", "req/s", 0),
        ("steady_server_cpu_pct", "steady state: kube-apiserver CPU (the whole fleet's)", "%", 1),
        ("server_rss_mib", "steady state: kube-apiserver RSS with the side's writers running", "MiB", 0),
        ("churn_per_1000_hour", "churn, 1% of Nodes a minute: requests per 1,000 Nodes per hour", "", 0),
        ("churn_writes_per_1000_hour", "churn: writes per 1,000 Nodes per hour", "", 0),
        ("churn_latency_s", "churn: time from a file changed to its Node labelled, median", "s", 2),
        ("churn_latency_max_s", "churn: the same, the longest", "s", 2),
        ("rolling_s", "every writer restarted, 10% at a time (NFD: and nfd-master): time", "s", 0),
        ("rolling_requests", "the same: requests per writer", "", 1),
        ("rolling_writes", "the same: writes per writer", "", 2),
        ("rolling_removed", "the same: labels removed", "", 0),
        ("restart_down_s", "kube-apiserver killed and restarted: seconds until it answered", "s", 1),
        ("restart_change_s", "the same: a change made then on every Node, until the last has it", "s", 1),
        ("restart_requests", "the same: requests per writer from the kill to the last change", "", 1),
        ("restart_busiest", "the same: busiest second of the side's requests", "req/s", 0),
        ("restart_failed", "the same: requests failed (5xx, 429)", "", 0),
        ("restart_removed", "the same: labels removed", "", 0),
        ("removed", "labels removed by the side's writes over the whole round (audit log)", "", 0),
    ]
    if starting >= MIN_START:
        rows += [
            (
                "start_s",
                f"rolling start on {starting} fresh Nodes, 10% at a time: time until all labelled",
                "s",
                0,
            ),
            ("start_wave_s", "the same: one wave's time until its Nodes are labelled, median", "s", 1),
            ("start_wave_max_s", "the same: the slowest wave", "s", 1),
            ("start_requests", "the same: requests per writer (median)", "", 1),
            ("start_removed", "the same: labels removed", "", 0),
        ]
    got = [
        Figure(
            "nfd",
            f"{nodes:,}-Node fleet, {writers} writers: {what}",
            unit,
            values(ours, key),
            values(theirs, key),
            digits=digits,
            note=note if i == 0 else "",
        )
        for i, (key, what, unit, digits) in enumerate(row for row in rows if row[0] in last_ours)
    ]
    # NFD holds no watch per Node (its workers poll), so these are ours alone.
    per_watch = f"{nodes:,}-Node fleet, up to {held[-1].watches:,} simulated own-Node watches"
    return [
        *got,
        Figure("nfd", f"{per_watch}: kube-apiserver live heap and stacks per 1,000 watches", "MiB", [live]),
        Figure(
            "nfd", f"{per_watch}: kube-apiserver goroutines per 1,000 watches", "", [goroutines], digits=0
        ),
        Figure("nfd", f"{per_watch}: kube-apiserver RSS per 1,000 watches", "MiB", [rss]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pieces.fleet_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--nodes", type=int, default=1000, help="Nodes in the fleet (default 1000)")
    parser.add_argument("--writers", type=int, default=300, help="real writers per side (default 300)")
    parser.add_argument("--steady-window", type=float, default=300.0, help="seconds of steady state (300)")
    parser.add_argument("--churn-window", type=float, default=180.0, help="seconds of 1%%/minute churn (180)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each side, alternating (1)")
    parser.add_argument("--lease-seconds", type=int, default=40, help="the Nodes' Lease duration (40)")
    args = parser.parse_args(argv)
    began, load = time.monotonic(), os.getloadavg()
    installed = install()
    got = figures(
        installed,
        nodes=args.nodes,
        writers=args.writers,
        steady=args.steady_window,
        churn=args.churn_window,
        rounds=args.rounds,
        lease_seconds=args.lease_seconds,
    )
    print(
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} before and {os.getloadavg()[0]:.2f} after; "
        f"{time.monotonic() - began:.0f} s. {installed.describe()}.\n"
    )
    print(markdown("nfd-lite against upstream NFD on a simulated fleet", "NFD", got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
