"""nfd-lite beside upstream NFD (nfd-worker + nfd-master, scripts/peers/nfd) on the real kube-apiserver.

    .venv/bin/python benchmarks/nfd_compare.py propagation [--changes 200] [--no-fake]
    .venv/bin/python benchmarks/nfd_compare.py scale [--nodes 100,1000] [--steady-window 120] [--no-fake]

Both writers run as their pods run them (tests/kube: pod-bound tokens at the in-cluster path; nfd-worker
reads its hard-coded features.d, a bind mount in a private mount namespace; local source only, which is the
job nfd-lite does), each with its defaults. Requests are counted at the server from its audit log, by
identity. "ours / theirs" is nfd-lite's figure over NFD's; the fake column is nfd-lite against the in-process
fake API server (tests/apiserver), as the older benchmarks measure it.

propagation: one features directory, watched by nfd-lite (for one Node) and nfd-worker (for another);
  each change renames a new file into place, and the clock stops when the new label value is seen on each
  Node through a watch on the server. NFD's worker takes at most one directory event per second (a fixed
  ticker; events in between are dropped until its 60 s rescan), so each change's temp file is written at
  least 1.1 s before its rename and renames are at least 1.1 s apart: the figure is the path from a
  delivered event to the label. Peak RSS of each process is read after the changes.

scale: for each N, N Nodes, each with its own directory and its own writer; first all nfd-lite writers are
  started at once, then (after they stop) all nfd-workers. Cold start: from the first process start until
  every Node carries the labels, the requests/s at the server (mean and busiest second). Steady state: the
  next --steady-window seconds with nothing changing, requests/s and per node per hour. The time until
  all are labelled is mostly N processes starting on this machine's few cores (in a cluster each starts
  on a node of its own); the requests per node and the rates at the server are what carry over. N stops
  where the writers' memory would not fit (N x the measured peak RSS of one > half of MemAvailable; the
  machine is shared).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _real_cluster import (
    LITE_USER,
    MASTER_USER,
    WORKER_USER,
    Cluster,
    LiteWriter,
    NfdProcess,
    Request,
    peak_rss_mib,
    percentile,
    ratio,
    server_requests,
    tally,
    write_atomic,
)

PROFILE_TEXT = (
    "nvidia.com/gpu.present=true\nnvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
    "nvidia.com/gpu.memory=81559\nnvidia.com/cuda.driver-version.full=550.54.15\n"
    "nvidia.com/gpu.family=hopper\nnvidia.com/mig.capable=true\n"
)
# The label each change rewrites: one of gfd's own keys, which both writers accept.
KEY = "nvidia.com/gpu.machine"
SPACING = 1.1  # NFD's worker drops directory events less than a second apart
SETTLE = 5.0  # seconds after the last Node got its labels that still carry the cold start's tail


def row(name: str, ours: float, theirs: float, unit: str, fake: float | None = None) -> str:
    fake_text = f"{fake:10.2f}" if fake is not None else f"{'-':>10}"
    return f"  {name:<34}{fake_text}{ours:12.2f}{theirs:12.2f}{ratio(ours, theirs):>10}  {unit}"


def header() -> str:
    return f"  {'':<34}{'lite/fake':>10}{'lite/real':>12}{'NFD/real':>12}{'ours/NFD':>10}"


# ---- propagation -------------------------------------------------------------------------------------


def fake_propagation(changes: int) -> tuple[list[float], float]:
    """nfd-lite against the fake API server, the same procedure (for the fake column)."""
    from _nfd_lite_common import Bench

    bench = Bench()
    try:
        bench.write(f"{KEY}=warmup\n")
        assert bench.wait_label(KEY, "warmup", 60), "writer did not start"
        samples = []
        for i in range(changes + 5):
            temp = bench.features / ".gfd.tmp"
            temp.write_text(f"{PROFILE_TEXT}{KEY}=v{i}\n")
            started = time.perf_counter()
            temp.rename(bench.features / "gfd")
            assert bench.wait_label(KEY, f"v{i}"), f"change {i} never arrived"
            if i >= 5:
                samples.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)
        return sorted(samples), bench.peak_rss_kib() / 1024
    finally:
        bench.close()


def propagation(args: argparse.Namespace) -> None:
    fake, fake_rss = fake_propagation(args.changes) if not args.no_fake else ([], None)
    with Cluster() as c:
        features = c.tmp / "features.d"
        features.mkdir()
        lite_node, nfd_node = c.node("lite-0"), c.node("nfd-0")
        write_atomic(features, f"{PROFILE_TEXT}{KEY}=warmup\n")
        lite = c.prepare_lite(lite_node, features).start()
        worker = c.prepare_worker(nfd_node, features).start()
        for node in (lite_node, nfd_node):
            assert c.watch.wait(node, KEY, "warmup", 120), f"{node} never labelled"
        measured_from = time.time()
        ours: list[float] = []
        theirs: list[float] = []
        missed = 0
        temp = features / ".gfd.tmp"
        temp.write_text(f"{PROFILE_TEXT}{KEY}=v0\n")
        temp_written = last_rename = time.perf_counter()
        for i in range(args.changes + 5):
            time.sleep(
                max(
                    0.0,
                    temp_written + SPACING - time.perf_counter(),
                    last_rename + SPACING - time.perf_counter(),
                )
            )
            started = last_rename = time.perf_counter()
            temp.rename(features / "gfd")
            temp.write_text(f"{PROFILE_TEXT}{KEY}=v{i + 1}\n")  # the next change, well ahead
            temp_written = time.perf_counter()
            seen = [c.watch.wait(node, KEY, f"v{i}", 90) for node in (lite_node, nfd_node)]
            if None in seen:
                missed += 1
                continue
            if i >= 5:  # the first few warm caches and connections
                ours.append((seen[0] - started) * 1000)  # type: ignore[operator]
                theirs.append((seen[1] - started) * 1000)  # type: ignore[operator]
        requests = server_requests(c.kube, measured_from)
        rss = {name: peak_rss_mib(pid) for name, pid in
               (("lite", lite.pid), ("worker", worker.pid), ("master", c.master.pid))}  # fmt: skip
    ours.sort()
    theirs.sort()
    n = len(ours)
    print(f"propagation: file renamed into place -> label seen on the Node, {n} changes ({missed} missed)")
    print(header())
    for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        fake_value = percentile(fake, fraction) if fake else None
        print(row(name, percentile(ours, fraction), percentile(theirs, fraction), "ms", fake_value))
    print(row("mean", statistics.fmean(ours), statistics.fmean(theirs), "ms",
              statistics.fmean(fake) if fake else None))  # fmt: skip
    changes = args.changes + 5
    lite_calls = tally(requests, LITE_USER)
    nfd_calls = tally(requests, WORKER_USER) + tally(requests, MASTER_USER)
    print(row("API requests per change", lite_calls.total() / changes, nfd_calls.total() / changes, "req"))
    lite_writes = sum(1 for r in requests if r.user == LITE_USER and r.write)
    nfd_writes = sum(1 for r in requests if r.user in (WORKER_USER, MASTER_USER) and r.write)
    print(row("API writes per change", lite_writes / changes, nfd_writes / changes, "req"))
    print(f"    nfd-lite: {dict(lite_calls)}")
    print(f"    NFD worker: {dict(tally(requests, WORKER_USER))}")
    print(f"    NFD master: {dict(tally(requests, MASTER_USER))}")
    print(f"peak RSS after {changes} changes (VmHWM)")
    print(header())
    print(row("writer on the node", rss["lite"], rss["worker"], "MiB", fake_rss))
    print(row("writer side (NFD: worker + master)", rss["lite"], rss["worker"] + rss["master"], "MiB"))
    print(f"    nfd-master alone: {rss['master']:.1f} MiB (one per cluster)")


# ---- scale and steady state --------------------------------------------------------------------------


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rates(requests: list[Request], users: set[str], start: float, end: float) -> tuple[int, float, int]:
    """(requests, mean per second, busiest second) by ``users`` received in [start, end]."""
    times = [r.at for r in requests if r.user in users and start <= r.at <= end]
    per_second = Counter(math.floor(t) for t in times)
    return len(times), len(times) / max(end - start, 1e-9), max(per_second.values(), default=0)


def run_side(c: Cluster, side: str, count: int, window: float) -> dict[str, Any]:
    users = {LITE_USER} if side == "lite" else {WORKER_USER, MASTER_USER}
    nodes = [c.node(f"{side}-{count}-{i}") for i in range(count)]
    dirs = []
    for node in nodes:
        directory = c.tmp / "scale" / node
        directory.mkdir(parents=True)
        write_atomic(directory, PROFILE_TEXT)
        dirs.append(directory)
    processes: list[LiteWriter | NfdProcess]
    if side == "lite":  # tokens issued and sandboxes laid out first, so that all start together
        processes = [c.prepare_lite(node, d) for node, d in zip(nodes, dirs, strict=True)]
    else:
        processes = [c.prepare_worker(node, d) for node, d in zip(nodes, dirs, strict=True)]
    started_wall, started = time.time(), time.perf_counter()
    for process in processes:
        process.start()
    spawned = time.perf_counter() - started
    deadline = started + 600
    while (labelled := c.watch.count_with(nodes, "nvidia.com/gpu.present", "true")) < count:
        if time.perf_counter() > deadline:
            raise SystemExit(f"{side} x{count}: only {labelled} Nodes labelled after 600 s")
        with c.watch.cond:
            c.watch.cond.wait(1.0)
    cold = time.perf_counter() - started
    cold_end_wall = started_wall + cold
    time.sleep(SETTLE + window)
    requests = server_requests(c.kube, started_wall - 1)
    rss = [peak_rss_mib(p.pid) for p in processes]
    for p in processes:
        p.stop()
    n_cold, rate_cold, peak_cold = rates(requests, users, started_wall - 1, cold_end_wall + 1)
    cold_kinds = [r for r in requests if r.user in users and r.at <= cold_end_wall + 1]
    steady_from = cold_end_wall + SETTLE
    steady = [r for r in requests if r.user in users and steady_from <= r.at < steady_from + window]
    writes = sum(1 for r in steady if r.write)
    return {
        "spawn_s": spawned, "cold_s": cold, "cold_requests": n_cold, "cold_rate": rate_cold,
        "cold_peak": peak_cold, "steady_rate": len(steady) / window,
        "per_node_hour": len(steady) / count * 3600 / window,
        "writes_per_node_hour": writes / count * 3600 / window,
        "rss_mean": statistics.fmean(rss), "rss_sum": sum(rss), "master_rss": peak_rss_mib(c.master.pid),
        "cold_kinds": kinds(cold_kinds), "steady_kinds": kinds(steady),
    }  # fmt: skip


def kinds(requests: list[Request]) -> dict[str, int]:
    return dict(Counter(f"{r.user.rsplit(':', 1)[1]} {r.verb} {r.resource}" for r in requests))


def fake_steady(window: float) -> float:
    """nfd-lite's requests per node per hour against the fake API server, defaults, one node."""
    from nfd_lite_steady_state import measure

    _, total = measure(window)
    return total * 3600 / window


# What a window of minutes cannot show: requests on periods longer than the window.
STRUCTURAL = """    longer periods, per node per hour: nfd-lite 2 (its one watch is renewed every
    --watch-timeout=1800 s; its 60 s rescans read only files); NFD 60 from nfd-worker (a GET of its
    NodeFeature at every 60 s rescan, an UPDATE only on change) + 1 from nfd-master (its hourly resync
    GETs every Node, after one LIST) + the master's informer watches, renewed every 5-10 min for the
    whole cluster; 0 writes on both"""


def scale(args: argparse.Namespace) -> None:
    fake = fake_steady(args.steady_window) if not args.no_fake else None
    per_process = {"lite": 45.0, "nfd": 45.0}  # MiB, until measured
    with Cluster() as c:
        for count in args.nodes:
            available = mem_available_mib()
            need = {side: count * mib for side, mib in per_process.items()}
            if max(need.values()) > 0.5 * available:  # the machine is shared: leave it half
                print(f"scale x{count}: stops here: {count} writers need {need['lite'] / 1024:.1f} GiB "
                      f"(nfd-lite) / {need['nfd'] / 1024:.1f} GiB (nfd-worker) at the measured RSS, "
                      f"> half of MemAvailable {available / 1024:.1f} GiB")  # fmt: skip
                continue
            results = {side: run_side(c, side, count, args.steady_window) for side in ("lite", "nfd")}
            per_process = {side: result["rss_mean"] for side, result in results.items()}
            ours, theirs = results["lite"], results["nfd"]
            print(f"scale: {count} Nodes, each with its own writer (NFD: its own worker, one master)")
            print(header())
            print(row("cold start: all Nodes labelled", ours["cold_s"], theirs["cold_s"], "s"))
            print(row("cold start: requests", ours["cold_requests"], theirs["cold_requests"], "req"))
            print(row("cold start: mean requests/s", ours["cold_rate"], theirs["cold_rate"], "req/s"))
            print(row("cold start: busiest second", ours["cold_peak"], theirs["cold_peak"], "req/s"))
            print(row("steady: requests/s at server", ours["steady_rate"], theirs["steady_rate"], "req/s"))
            print(
                row("steady: requests/node/hour", ours["per_node_hour"], theirs["per_node_hour"], "req", fake)
            )
            print(row("steady: writes/node/hour", ours["writes_per_node_hour"],
                      theirs["writes_per_node_hour"], "req"))  # fmt: skip
            print(row("peak RSS per writer (mean)", ours["rss_mean"], theirs["rss_mean"], "MiB"))
            print(row("peak RSS, all writers", ours["rss_sum"], theirs["rss_sum"], "MiB"))
            print(f"    nfd-master peak RSS so far (one per cluster): {theirs['master_rss']:.1f} MiB")
            print(f"    processes started in {ours['spawn_s']:.1f} s (lite), {theirs['spawn_s']:.1f} s (NFD)")
            print(f"    cold start nfd-lite: {ours['cold_kinds']}")
            print(f"    cold start NFD:      {theirs['cold_kinds']}")
            print(f"    steady nfd-lite: {ours['steady_kinds']}")
            print(f"    steady NFD:      {theirs['steady_kinds']}")
            print(STRUCTURAL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=["propagation", "scale"])
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--nodes", type=lambda s: [int(n) for n in s.split(",")], default=[100, 1000])
    # a multiple of nfd-worker's 60 s rescan: its workers start together, so their rescans are in step
    parser.add_argument("--steady-window", type=float, default=120.0)
    parser.add_argument("--no-fake", action="store_true", help="skip the fake API server column")
    args = parser.parse_args()
    {"propagation": propagation, "scale": scale}[args.phase](args)


if __name__ == "__main__":
    main()
