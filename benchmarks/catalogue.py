"""The pieces by name: what each measures, how the run's settings reach it, and which table its figures
go to. ``python -m benchmarks`` (benchmarks/__main__.py) runs them; each piece's work is in
benchmarks/pieces/, what the pieces share in benchmarks/support/. Imports go one way only: the entry point
imports this catalogue, the catalogue the pieces, the pieces the support modules (and tests/ for the
harness), so no module imports one above it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.pieces import (
    apiserver_latency,
    fleet_scale,
    fleet_view,
    gfd_daemon_rss,
    gfd_probe,
    gfd_vs_nvidia,
    nfd_compare,
    nfd_lite_propagation,
    nfd_lite_rss,
    nfd_lite_steady_state,
    policy_cost,
)
from benchmarks.support.install import Installed
from benchmarks.support.measure import Figure
from benchmarks.support.real_cluster import Cluster


@dataclass
class Settings:
    runs: int = 10  # runs of each side for the quick figures (oneshot, first command, daemon alone)
    daemon_runs: int = 10
    passes: int = 50
    interval: str = "100ms"
    start_runs: int = 10
    start_changes: int = 3
    changes: int = 200
    flood_files: int = 100_000
    flood_runs: int = 3
    nodes: list[int] = field(default_factory=lambda: [100])
    scale_runs: int = 5
    steady_window: float = 60.0
    probe_repeat: int = 200
    alone_seconds: float = 3.0
    fake_window: float = 60.0
    kopf_python: str | None = None
    policy_runs: int = 8
    policy_patches: int = 50
    policy: Path | None = None  # the admission policy file measured (default: rbac/'s)
    fleet_nodes: int = 1000  # fleet-scale: Nodes kept Ready by kwok
    fleet_writers: int = 300  # fleet-scale: real writers per side
    fleet_steady: float = 300.0  # fleet-scale: seconds of steady state
    fleet_churn: float = 180.0  # fleet-scale: seconds of 1%/minute churn


QUICK = Settings(
    runs=3,
    daemon_runs=3,
    passes=10,
    start_runs=3,
    start_changes=1,
    changes=20,
    flood_files=10_000,
    flood_runs=1,
    nodes=[20],
    scale_runs=1,
    probe_repeat=20,
    alone_seconds=1.0,
    fake_window=10.0,
    policy_runs=2,
    policy_patches=10,
    fleet_nodes=60,
    fleet_writers=10,
    fleet_steady=20.0,
    fleet_churn=60.0,
)


@dataclass
class Context:
    installed: Installed
    settings: Settings
    stack: contextlib.ExitStack
    started_cluster: Cluster | None = None
    writer_rss_mib: float = 45.0  # until measured: how much memory one writer takes, for the scale guard

    def cluster(self) -> Cluster:
        """The real control plane with NFD, started on first use and shared by the pieces that need it."""
        if self.started_cluster is None:
            if os.geteuid() != 0:
                raise PermissionError(
                    "the real-cluster pieces run the writers in mount namespaces: run as root"
                )
            self.started_cluster = self.stack.enter_context(Cluster(self.installed))
        return self.started_cluster


# ---- the pieces --------------------------------------------------------------------------------------


def gfd_oneshot(x: Context) -> list[Figure]:

    return gfd_vs_nvidia.oneshot_figures(x.installed, runs=x.settings.runs)


def gfd_daemon(x: Context) -> list[Figure]:

    s = x.settings
    return gfd_vs_nvidia.daemon_figures(x.installed, runs=s.daemon_runs, passes=s.passes, interval=s.interval)


def gfd_first_command(x: Context) -> list[Figure]:

    return gfd_vs_nvidia.first_command_figures(x.installed, runs=x.settings.runs)


def gfd_alone(x: Context) -> list[Figure]:

    return gfd_daemon_rss.figures(x.installed, runs=x.settings.runs, seconds=x.settings.alone_seconds)


def gfd_probe_pass(x: Context) -> list[Figure]:

    return gfd_probe.figures(repeat=x.settings.probe_repeat)


def policy_cost_piece(x: Context) -> list[Figure]:

    s = x.settings
    return policy_cost.figures(policy=s.policy, runs=s.policy_runs, patches=s.policy_patches)


def nfd_start(x: Context) -> list[Figure]:

    got = nfd_compare.start(x.cluster(), runs=x.settings.start_runs, changes=x.settings.start_changes)
    x.writer_rss_mib = max(max(f.ours) for f in got if f.unit == "MiB")
    return got


def nfd_propagation(x: Context) -> list[Figure]:

    return nfd_compare.propagation(x.cluster(), changes=x.settings.changes)


def nfd_flood(x: Context) -> list[Figure]:

    return nfd_compare.flood(x.cluster(), runs=x.settings.flood_runs, files=x.settings.flood_files)


def nfd_scale(x: Context) -> list[Figure]:

    s = x.settings
    return nfd_compare.scale(
        x.cluster(), counts=s.nodes, runs=s.scale_runs, steady=s.steady_window, rss_mib=x.writer_rss_mib
    )


def nfd_lite_fake(x: Context) -> list[Figure]:

    return nfd_lite_propagation.figures(x.installed, changes=x.settings.changes)


def nfd_lite_clients(x: Context) -> list[Figure]:

    return nfd_lite_rss.figures(x.installed, runs=min(x.settings.runs, 3), kopf_python=x.settings.kopf_python)


def apiserver_overhead(x: Context) -> list[Figure]:

    return apiserver_latency.figures()


def fleet_view_piece(x: Context) -> list[Figure]:

    return fleet_view.figures(x.installed, runs=x.settings.runs)


def fleet_scale_piece(x: Context) -> list[Figure]:

    s = x.settings
    return fleet_scale.figures(
        x.installed,
        nodes=s.fleet_nodes,
        writers=s.fleet_writers,
        steady=s.fleet_steady,
        churn=s.fleet_churn,
    )


def nfd_lite_steady_fake(x: Context) -> list[Figure]:

    return nfd_lite_steady_state.figures(x.installed, window=x.settings.fake_window)


Piece = Callable[[Context], list[Figure]]
# name -> (what it measures, the function); in the order a full run takes them
PIECES: dict[str, tuple[str, Piece]] = {
    "gfd-oneshot": ("gfd vs NVIDIA's GFD: --oneshot CPU and peak RSS", gfd_oneshot),
    "gfd-daemon": ("gfd vs NVIDIA's GFD: daemon CPU per pass, peak RSS as the chart runs it", gfd_daemon),
    "gfd-first-command": ("the README's first command: CPU, peak RSS", gfd_first_command),
    "gfd-alone": (
        "gfd daemon alone: peak RSS (mock backend, no NVML), rewrites of an unchanged file",
        gfd_alone,
    ),
    "gfd-probe": (
        "gfd probe + label pass over the tests' fake NVML: CPU and NVML calls per GPU",
        gfd_probe_pass,
    ),
    "policy-cost": (
        "the admission policy: kube-apiserver CPU per writer PATCH, bound / unbound",
        policy_cost_piece,
    ),
    "nfd-start": ("nfd-lite vs NFD, one node: start -> first label, CPU then, peak RSS", nfd_start),
    "nfd-propagation": (
        "nfd-lite vs NFD: propagation p50/p99, requests and writes per change",
        nfd_propagation,
    ),
    "nfd-flood": ("nfd-lite alone: peak RSS with a flooded directory", nfd_flood),
    "nfd-scale": ("nfd-lite vs NFD: N Nodes cold start, writer CPU, requests, steady state", nfd_scale),
    "nfd-lite-fake": ("nfd-lite alone on the fake API server: propagation, peak RSS", nfd_lite_fake),
    "nfd-lite-clients": ("client options nfd-lite was chosen from: peak RSS", nfd_lite_clients),
    "apiserver-overhead": ("the fake API server's own PATCH and watch latency", apiserver_overhead),
}
EXTRA: dict[str, tuple[str, Piece]] = {  # on demand only
    "nfd-lite-steady-fake": (
        "nfd-lite alone on the fake API server: requests per node per hour",
        nfd_lite_steady_fake,
    ),
    "fleet-view": (
        "gfd fleet vs kubectl get nodes -o json: 1,000 and 5,000 Nodes, wall time, peak RSS",
        fleet_view_piece,
    ),
    "fleet-scale": (
        "nfd-lite vs NFD on a kwok fleet: rollout requests and time, steady state, the server's figures",
        fleet_scale_piece,
    ),
}
TABLES = {  # table -> (title, the peer's column)
    "gfd": (
        "gfd against NVIDIA's gpu-feature-discovery {gfd} over the same mock NVML (8x A100)",
        "NVIDIA's GFD",
    ),
    "nfd": (
        "nfd-lite against upstream NFD {nfd} (nfd-worker, local source, + nfd-master), real "
        "kube-apiserver {kube}",
        "NFD",
    ),
    "policy": (
        "The admission policy's cost to kube-apiserver {kube}: CPU per writer PATCH with the policy bound "
        "(ours) and with its binding deleted",
        "without the binding",
    ),
    "alone": ("Ourselves alone", None),
    "fleet": ("`gfd fleet` on real kube-apiserver {kube}", "kubectl get nodes -o json"),
}
