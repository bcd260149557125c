"""nfd-lite beside upstream NFD (nfd-worker + nfd-master, scripts/peers/nfd) on the real kube-apiserver.

Both writers run as their pods run them (tests/kube: pod-bound tokens at the in-cluster path, each as a
non-root user of its own). nfd-lite is the installed product (benchmarks/support/install.py) with the chart's
arguments in the hostPath mode: two directories, source.d (gfd's file) and features.d (another file),
caps at their defaults, metrics on. nfd-worker reads its hard-coded features.d, holding the same two
files, with its local source only (the job nfd-lite does); nfd-master runs once, on a Node of its own,
and is counted on NFD's side where the whole label-writing side is compared. Requests are counted at the
server from its audit log, by identity.

- start: rounds alternating between the two, each on a fresh Node with its files in place: process
  start -> both files' labels seen on the Node (through a watch on the server), the writer's CPU at that
  moment, then a few changes and its peak RSS (VmHWM). NFD's master is warm (running, caches synced,
  and one uncounted round of each side goes first).
- propagation: one directory watched by both (nfd-lite for one Node, nfd-worker for another); each change
  renames a new file into place, and the clock stops when the new value is seen on each Node. NFD's
  worker takes at most one directory event per second (a fixed ticker; events in between wait for its
  60 s rescan), so each temp file is written 1.1 s before its rename and renames are 1.1 s apart: the
  figure is the path from a delivered event to the label.
- flood: nfd-lite alone, its directory flooded (100,000 one-line files; or filled to the byte cap with
  short lines): peak RSS once the capped labels are on the Node.
- scale: N Nodes, each with its own writer, all started at once, rounds alternating between the two:
  the time until every Node is labelled, the writers' CPU per start at that moment (on this machine's
  two cores the cold start is CPU-bound: N interpreters starting), the requests at the server; in the
  last round the next --steady-window seconds with nothing changing. N stops where the writers' memory
  would not fit (N x the measured RSS of one > half of MemAvailable).
"""

from __future__ import annotations

import itertools
import math
import shutil
import statistics
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.support.measure import Figure, cpu_seconds, interleaved, peak_rss_mib, percentile
from benchmarks.support.real_cluster import (
    LITE_USER,
    MASTER_USER,
    WORKER_USER,
    Cluster,
    Request,
    server_requests,
    tally,
    write_atomic,
)
from tests.kube.process import LoggedProcess

PROFILE_TEXT = (
    "nvidia.com/gpu.present=true\nnvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
    "nvidia.com/gpu.memory=81559\nnvidia.com/cuda.driver-version.full=550.54.15\n"
    "nvidia.com/gpu.family=hopper\nnvidia.com/mig.capable=true\n"
)
# The label each change rewrites: one of gfd's own keys, which both writers accept.
KEY = "nvidia.com/gpu.machine"
# A file of another writer, in features.d (the hostPath mode's second directory).
EXTRA_KEY, EXTRA_TEXT = (
    "feature.node.kubernetes.io/bench-extra",
    "feature.node.kubernetes.io/bench-extra=true\n",
)
SPACING = 1.1  # NFD's worker drops directory events less than a second apart
SETTLE = 5.0  # seconds after the last Node got its labels that still carry the cold start's tail
LABEL_TIMEOUT = 180.0
SIDES = ("lite", "nfd")


def _lay_out(c: Cluster, side: str, node: str) -> tuple[Path, list[Path]]:
    """A node's files in place: (the directory gfd writes, the writer's directories)."""
    home = c.tmp / "nodes" / node
    source, features = home / "source.d", home / "features.d"
    features.mkdir(parents=True)
    gfd_dir = source if side == "lite" else features
    gfd_dir.mkdir(exist_ok=True)
    write_atomic(gfd_dir, f"{PROFILE_TEXT}{KEY}=start\n")
    write_atomic(features, EXTRA_TEXT, "extra")
    return gfd_dir, [source, features] if side == "lite" else [features]


def _prepare(c: Cluster, side: str, node: str, directories: list[Path]) -> LoggedProcess:
    return c.prepare_lite(node, directories) if side == "lite" else c.prepare_worker(node, directories[0])


def _labelled_at(c: Cluster, node: str, process: LoggedProcess) -> float:
    """When both files' labels were first seen on ``node`` (perf_counter)."""
    seen = [
        c.watch.wait(node, KEY, "start", LABEL_TIMEOUT),
        c.watch.wait(node, EXTRA_KEY, "true", LABEL_TIMEOUT),
    ]
    if None in seen:
        raise RuntimeError(
            f"{process.name}: {node} not labelled in {LABEL_TIMEOUT:.0f} s (log {process.log})"
        )
    return max(t for t in seen if t is not None)


def change(c: Cluster, directory: Path, nodes: list[str], count: int, tag: str) -> list[list[float] | None]:
    """``count`` changes of KEY in ``directory``'s gfd file, as gfd makes them (a temp file renamed in),
    each temp file written SPACING before its rename and renames SPACING apart; per change the ms from
    rename to the value seen on each of ``nodes`` (None: not seen within 90 s)."""
    temp = directory / ".gfd.tmp"
    temp.write_text(f"{PROFILE_TEXT}{KEY}={tag}0\n")
    temp_written = last_rename = time.perf_counter()
    got: list[list[float] | None] = []
    for i in range(count):
        now = time.perf_counter()
        time.sleep(max(0.0, temp_written + SPACING - now, last_rename + SPACING - now))
        started = last_rename = time.perf_counter()
        temp.rename(directory / "gfd")
        temp.write_text(f"{PROFILE_TEXT}{KEY}={tag}{i + 1}\n")  # the next change, well ahead
        temp_written = time.perf_counter()
        seen = [c.watch.wait(node, KEY, f"{tag}{i}", 90) for node in nodes]
        got.append(None if None in seen else [(t - started) * 1000 for t in seen if t is not None])
    return got


# ---- start: one node, process start -> first label, CPU, peak RSS ----------------------------------


def _start_round(c: Cluster, side: str, name: str, changes: int) -> dict[str, float]:
    node = c.node(name)
    gfd_dir, directories = _lay_out(c, side, node)
    process = _prepare(c, side, node, directories)
    started = time.perf_counter()
    process.start()
    try:
        first = _labelled_at(c, node, process) - started
        cpu = cpu_seconds(process.pid)
        if None in change(c, gfd_dir, [node], changes, "c"):
            raise RuntimeError(f"{process.name}: a change never reached {node} (log {process.log})")
        rss = peak_rss_mib(process.pid)
    finally:
        c.stop([process])
        c.forget([node])
    master = peak_rss_mib(c.master.pid) if side == "nfd" else 0.0
    return {"first_ms": first * 1000, "cpu_ms": cpu * 1000, "rss": rss, "side_rss": rss + master}


def start(c: Cluster, *, runs: int, changes: int) -> list[Figure]:
    numbers = itertools.count()
    for side in SIDES:  # uncounted: first reads from disk, the master's first NodeFeature
        _start_round(c, side, f"{side}-warm", 1)
    ours, theirs = interleaved(
        runs,
        lambda: _start_round(c, "lite", f"lite-start-{next(numbers)}", changes),
        lambda: _start_round(c, "nfd", f"nfd-start-{next(numbers)}", changes),
    )
    master = peak_rss_mib(c.master.pid)
    return [
        Figure(
            "nfd",
            "process start -> first label, one node (NFD: warm master)",
            "ms",
            ours["first_ms"],
            theirs["first_ms"],
            digits=0,
            note="Start: until the labels of both directories' files are seen on the Node; the sandbox "
            "that puts the token at the in-cluster path adds a few ms of time and CPU to both.",
        ),
        Figure(
            "nfd",
            "CPU of the writer at its first label (nfd-lite vs nfd-worker)",
            "ms",
            ours["cpu_ms"],
            theirs["cpu_ms"],
            digits=0,
        ),
        Figure(
            "nfd",
            f"peak RSS per node, chart's configuration, after start + {changes} changes",
            "MiB",
            ours["rss"],
            theirs["rss"],
            note=f"NFD's side of the label writing is nfd-worker on each node + nfd-master once "
            f"(peak {master:.1f} MiB here).",
        ),
        Figure(
            "nfd",
            "peak RSS of the label-writing side, one node (NFD: worker + master)",
            "MiB",
            ours["rss"],
            theirs["side_rss"],
        ),
    ]


# ---- propagation -------------------------------------------------------------------------------------


def propagation(c: Cluster, *, changes: int) -> list[Figure]:
    shared = c.tmp / "propagation" / "features.d"
    own = c.tmp / "propagation" / "lite-features.d"  # nfd-lite's second directory, empty here
    shared.mkdir(parents=True)
    own.mkdir()
    write_atomic(shared, f"{PROFILE_TEXT}{KEY}=warmup\n")
    lite_node, nfd_node = c.node("propagation-lite"), c.node("propagation-nfd")
    lite = c.prepare_lite(lite_node, [shared, own]).start()
    worker = c.prepare_worker(nfd_node, shared).start()
    try:
        for node, process in ((lite_node, lite), (nfd_node, worker)):
            if c.watch.wait(node, KEY, "warmup", LABEL_TIMEOUT) is None:
                raise RuntimeError(f"{process.name}: {node} not labelled (log {process.log})")
        measured_from = time.time()
        got = change(c, shared, [lite_node, nfd_node], changes + 5, "v")
        requests = server_requests(c.kube, measured_from)
        rss = peak_rss_mib(lite.pid), peak_rss_mib(worker.pid)
    finally:
        c.stop([lite, worker])
        c.forget([lite_node, nfd_node])
    counted = [g for g in got[5:] if g is not None]  # the first few warm caches and connections
    ours, theirs = sorted(g[0] for g in counted), sorted(g[1] for g in counted)
    total = changes + 5
    lite_calls = tally(requests, LITE_USER)
    nfd_calls = tally(requests, WORKER_USER) + tally(requests, MASTER_USER)
    lite_writes = sum(1 for r in requests if r.user == LITE_USER and r.write)
    nfd_writes = sum(1 for r in requests if r.user in (WORKER_USER, MASTER_USER) and r.write)
    what = f"file renamed in -> label on the Node, {len(counted)} changes"
    missed = sum(1 for g in got if g is None)
    return [
        Figure(
            "nfd",
            f"{what}, p50",
            "ms",
            [percentile(ours, 0.5)],
            [percentile(theirs, 0.5)],
            note=f"Propagation: {missed} changes missed. Requests per change over all {total} "
            f"(audit log): nfd-lite {dict(lite_calls)}; NFD worker "
            f"{dict(tally(requests, WORKER_USER))}, master {dict(tally(requests, MASTER_USER))}.",
        ),
        Figure("nfd", f"{what}, p99", "ms", [percentile(ours, 0.99)], [percentile(theirs, 0.99)]),
        Figure(
            "nfd",
            "API requests per change",
            "",
            [lite_calls.total() / total],
            [nfd_calls.total() / total],
            digits=2,
        ),
        Figure("nfd", "API writes per change", "", [lite_writes / total], [nfd_writes / total], digits=2),
        Figure("nfd", f"peak RSS per node after {total} changes", "MiB", [rss[0]], [rss[1]]),
    ]


# ---- flood (nfd-lite alone) --------------------------------------------------------------------------


def _flood_files(directory: Path, files: int) -> str:
    for i in range(files):
        (directory / f"f{i:06d}").write_text(f"feature.node.kubernetes.io/flood-{i:06d}=true\n")
    return f"feature.node.kubernetes.io/flood-{min(files, 1000) - 1:06d}"  # the last one under the caps


def _flood_bytes(directory: Path) -> str:
    """Short one-key lines in files of 60,000 bytes (under the 64 KiB per file) until past the 128 KiB
    per directory; the label to wait for is the last of the first 1,000 keys in key order."""
    keys, i, written = [], 0, 0
    for part in range(3):  # the third crosses the directory cap and is not used
        lines = []
        size = 0
        while size < 60_000:
            line = f"b{i}\n"
            lines.append(line)
            size += len(line)
            i += 1
        (directory / f"part{part}").write_text("".join(lines))
        if written + size <= 131_072:
            keys += [f"feature.node.kubernetes.io/{line.strip()}" for line in lines]
        written += size
    return sorted(keys)[999]


def _flood_round(c: Cluster, name: str, fill: str, files: int) -> float:
    node = c.node(name)
    source, features = c.tmp / "flood" / name / "source.d", c.tmp / "flood" / name / "features.d"
    source.mkdir(parents=True)
    features.mkdir()
    last = _flood_files(source, files) if fill == "files" else _flood_bytes(source)
    writer = c.prepare_lite(node, [source, features]).start()
    try:
        if c.watch.wait(node, last, "true", LABEL_TIMEOUT) is None:
            raise RuntimeError(f"nfd-lite: {node} not labelled with {last} (log {writer.log})")
        time.sleep(1.0)
        return peak_rss_mib(writer.pid)
    finally:
        c.stop([writer])
        c.forget([node])
        shutil.rmtree(source.parent, ignore_errors=True)


def flood(c: Cluster, *, runs: int, files: int) -> list[Figure]:
    by_files = [_flood_round(c, f"flood-files-{i}", "files", files) for i in range(runs)]
    by_bytes = [_flood_round(c, f"flood-bytes-{i}", "bytes", 0) for i in range(runs)]
    return [
        Figure(
            "alone",
            f"nfd-lite peak RSS, {files:,} one-line files in its directory (chart's "
            "configuration, real server)",
            "MiB",
            by_files,
            note="Flood: caps at their defaults, 1,000 labels written; the chart's limit is 128 MiB.",
        ),
        Figure(
            "alone",
            "nfd-lite peak RSS, its directory filled to the byte cap with short lines",
            "MiB",
            by_bytes,
        ),
    ]


# ---- scale -------------------------------------------------------------------------------------------


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _rates(requests: list[Request], users: set[str], start: float, end: float) -> tuple[int, float, int]:
    """(requests, mean per second, busiest second) by ``users`` received in [start, end]."""
    times = [r.at for r in requests if r.user in users and start <= r.at <= end]
    per_second = Counter(math.floor(t) for t in times)
    return len(times), len(times) / max(end - start, 1e-9), max(per_second.values(), default=0)


def _kinds(requests: list[Request]) -> dict[str, int]:
    return dict(Counter(f"{r.user.rsplit(':', 1)[1]} {r.verb} {r.resource}" for r in requests))


def _scale_round(c: Cluster, side: str, count: int, name: str, steady: float) -> dict[str, Any]:
    users = {LITE_USER} if side == "lite" else {WORKER_USER, MASTER_USER}
    nodes = [c.node(f"{name}-{i}") for i in range(count)]
    # tokens issued and sandboxes laid out first, so that all start together
    processes = [_prepare(c, side, node, _lay_out(c, side, node)[1]) for node in nodes]
    master_cpu = cpu_seconds(c.master.pid)
    started_wall, started = time.time(), time.perf_counter()
    try:
        for process in processes:
            process.start()
        deadline = started + 600
        while (
            min(c.watch.count_with(nodes, KEY, "start"), c.watch.count_with(nodes, EXTRA_KEY, "true")) < count
        ):
            if ended := next((p for p in processes if not p.running()), None):
                raise RuntimeError(f"{side} x{count}: a writer exited: {ended.output().strip()[-300:]}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{side} x{count}: not every Node labelled after 600 s")
            with c.watch.cond:
                c.watch.cond.wait(1.0)
        cold = time.perf_counter() - started
        cpu = [cpu_seconds(p.pid) for p in processes]
        master_cpu = cpu_seconds(c.master.pid) - master_cpu
        cold_end_wall = started_wall + cold
        if steady:
            time.sleep(SETTLE + steady)
        requests = server_requests(c.kube, started_wall - 1)
        rss = [peak_rss_mib(p.pid) for p in processes]
    finally:
        c.stop(processes)
        c.forget(nodes)
    n_cold, _, peak_cold = _rates(requests, users, started_wall - 1, cold_end_wall + 1)
    result: dict[str, Any] = {
        "cold_s": cold,
        "cpu_ms": statistics.fmean(cpu) * 1000,
        "cold_requests": n_cold,
        "cold_peak": peak_cold,
        "rss": statistics.fmean(rss),
        "master_cpu_ms": master_cpu * 1000 / count,
        "cold_kinds": _kinds([r for r in requests if r.user in users and r.at <= cold_end_wall + 1]),
    }
    if steady:
        steady_from = cold_end_wall + SETTLE
        window = [r for r in requests if r.user in users and steady_from <= r.at < steady_from + steady]
        result |= {
            "steady_rate": len(window) / steady,
            "per_node_hour": len(window) / count * 3600 / steady,
            "writes_per_node_hour": sum(1 for r in window if r.write) / count * 3600 / steady,
            "steady_kinds": _kinds(window),
        }
    return result


# What a window of minutes cannot show: requests on periods longer than the window.
STRUCTURAL = (
    "Longer periods, per node per hour: nfd-lite 2 (its one watch is renewed every --watch-timeout=1800 s; "
    "its 60 s rescans read only files); NFD 60 from nfd-worker (a GET of its NodeFeature at every 60 s "
    "rescan, an UPDATE only on change) + 1 from nfd-master (its hourly resync) + the master's informer "
    "watches, renewed every 5-10 min for the whole cluster; 0 writes on both."
)


def _scale_figures(c: Cluster, count: int, runs: int, steady: float) -> list[Figure]:
    last: dict[str, dict[str, Any]] = {}

    done: Counter[str] = Counter()

    def run(side: str) -> dict[str, float]:
        done[side] += 1
        i = done[side]
        result = _scale_round(c, side, count, f"{side}-x{count}-{i}", steady if i == runs else 0.0)
        last[side] = result
        return {k: v for k, v in result.items() if isinstance(v, float | int)}

    ours, theirs = interleaved(runs, partial(run, "lite"), partial(run, "nfd"))
    master_ms = statistics.median(theirs["master_cpu_ms"])
    rows = [  # key, what, unit, digits, note
        ("cold_s", "cold start: time until every Node is labelled", "s", 1,
         f"{count} Nodes: cold start in {runs} rounds; steady state in the last, over {steady:g} s. "
         f"NFD's master used {master_ms:.1f} ms of CPU per Node during its cold starts (not in the writer "
         f"CPU). Cold-start requests, last round: nfd-lite {last['lite']['cold_kinds']}; "
         f"NFD {last['nfd']['cold_kinds']}."),
        ("cpu_ms", "cold start: writer CPU per start (nfd-lite vs nfd-worker)", "ms", 0, ""),
        ("cold_requests", "cold start: requests at the server", "", 0, ""),
        ("cold_peak", "cold start: busiest second", "req/s", 0, ""),
        ("rss", "peak RSS per writer (mean)", "MiB", 1, ""),
        ("steady_rate", "steady state: requests/s at the server", "req/s", 2,
         f"{STRUCTURAL} Steady requests, last round: nfd-lite {last['lite']['steady_kinds']}; "
         f"NFD {last['nfd']['steady_kinds']}."),
        ("per_node_hour", "steady state: requests per node per hour", "", 1, ""),
        ("writes_per_node_hour", "steady state: writes per node per hour", "", 1, ""),
    ]  # fmt: skip
    return [
        Figure("nfd", f"{count} Nodes, {what}", unit, ours[key], theirs[key], digits=digits, note=note)
        for key, what, unit, digits, note in rows
    ]


def scale(c: Cluster, *, counts: list[int], runs: int, steady: float, rss_mib: float) -> list[Figure]:
    figures: list[Figure] = []
    for count in counts:
        available = mem_available_mib()
        if count * rss_mib > 0.5 * available:  # the machine is shared: leave it half
            print(
                f"scale x{count}: stops here: {count} writers need {count * rss_mib / 1024:.1f} GiB at the "
                f"measured RSS, > half of MemAvailable {available / 1024:.1f} GiB"
            )
            continue
        got = _scale_figures(c, count, runs, steady)
        rss_mib = max(rss_mib, *(max(f.ours + (f.theirs or [])) for f in got if f.unit == "MiB"))
        figures += got
    return figures
