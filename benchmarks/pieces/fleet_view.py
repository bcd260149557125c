"""`gfd fleet` on a real kube-apiserver holding 1,000 and 5,000 GPU Nodes: wall time and peak RSS of one
run, beside `kubectl get nodes -o json` (the read an administrator would otherwise start from, with no
summary) in the same run.

Each Node carries the labels gfd writes for an H100 node (tests/gfd/golden/h100.single.labels), the
writer's ownership record, and capacity for 8 GPUs; one in fifty is degraded, so the problems table is not
empty. Run as `python -m benchmarks fleet-view` (on demand, not in a full run: creating 5,000 Nodes
takes a minute or two).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.support.control_plane import control_plane
from benchmarks.support.install import Installed
from benchmarks.support.measure import Figure, interleaved, run_to_end
from benchmarks.support.paths import ROOT
from gfd.fleet.summary import OWNED
from tests.kube.controlplane import KUBECTL, ControlPlane

COUNTS = (1000, 5000)
GOLDEN = ROOT / "tests" / "gfd" / "golden" / "h100.single.labels"


def grow(kube: ControlPlane, upto: int, have: int) -> None:
    """Nodes ``have``..``upto``-1, sixteen requests at a time."""
    labels = dict(line.split("=", 1) for line in GOLDEN.read_text().splitlines() if "=" in line)
    record = ",".join(sorted(labels))

    def make(i: int) -> None:
        mine = {**labels, "nvidia.com/gpu.health": "degraded" if i % 50 == 0 else "ok"}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-{i:05d}", "labels": mine, "annotations": {OWNED: record}},
        }
        kube.must("POST", "/api/v1/nodes", body)
        status = {"status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
        kube.request(
            "PATCH", f"/api/v1/nodes/gpu-{i:05d}/status", status, content_type="application/merge-patch+json"
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make, range(have, upto)))


def figures(installed: Installed, counts: tuple[int, ...] = COUNTS, runs: int = 5) -> list[Figure]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    out: list[Figure] = []
    with control_plane("fleet-view-") as kube:
        have = 0
        kubeconfig = str(kube.admin_kubeconfig)
        for n in counts:
            grow(kube, n, have)
            have = n

            def ours() -> dict[str, float]:
                began = time.perf_counter()
                used = run_to_end(
                    [str(installed.python), "-m", "gfd", "fleet", "--json", "--kubeconfig", kubeconfig], env
                )
                return {"wall": time.perf_counter() - began, "rss": used.peak_rss_mib}

            def theirs() -> dict[str, float]:
                began = time.perf_counter()
                used = run_to_end(
                    [str(KUBECTL), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"], env
                )
                return {"wall": time.perf_counter() - began, "rss": used.peak_rss_mib}

            mine, peer = interleaved(runs, ours, theirs)
            note = (
                "ours: `gfd fleet --json` (one paginated LIST, 500 Nodes a page, grouped and checked); "
                "theirs: `kubectl get nodes -o json` (the same Nodes, no summary). Each Node an H100 node's "
                "labels."
            )
            out.append(
                Figure(
                    "fleet",
                    f"wall time, {n} Nodes",
                    "s",
                    mine["wall"],
                    peer["wall"],
                    digits=2,
                    note=note if n == counts[0] else "",
                )
            )
            out.append(Figure("fleet", f"peak RSS, {n} Nodes", "MiB", mine["rss"], peer["rss"]))
    return out
