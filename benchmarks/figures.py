"""Every figure of the README's benchmark tables, in one run, as Markdown tables.

    python benchmarks/figures.py [--quick] [PIECE ...]      (as root; PIECE: see --list; default: all)

The product runs as the image installs it (a regular, byte-compiled install of the working tree into a
private virtual environment, cached by a hash of the sources: benchmarks/_install.py) with the chart's
arguments (benchmarks/_chart.py). Ours and the peer alternate, run for run; each figure is the minimum
and the median of its runs beside the peer's from the same run, and the ratios ours / theirs of the
minima and of the medians. benchmarks/README.md says what each figure is and how it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import apiserver_latency  # noqa: E402
import fleet_view  # noqa: E402
import gfd_daemon_rss  # noqa: E402
import gfd_probe  # noqa: E402
import gfd_vs_nvidia  # noqa: E402
import nfd_compare  # noqa: E402
import nfd_lite_propagation  # noqa: E402
import nfd_lite_rss  # noqa: E402
import nfd_lite_steady_state  # noqa: E402
import policy_cost  # noqa: E402
from _install import Installed, InstallError, install  # noqa: E402
from _measure import Figure, markdown  # noqa: E402
from _real_cluster import Cluster  # noqa: E402


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


# ---- the run -----------------------------------------------------------------------------------------


def _go_module_version(peer: str, module: str) -> str:
    text = (ROOT / "scripts" / "peers" / peer / "go.mod").read_text()
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", text, re.MULTILINE)
    return found.group(1) if found else "(version unknown)"


def _kube_version() -> str:
    binary = ROOT / ".cache" / "peers" / "kubernetes" / "kube-apiserver"
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return "(not built)"
    return out.split()[-1] if out.strip() else "(version unknown)"


def _git() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = " with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{git('rev-parse', '--short', 'HEAD')}{dirty}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pieces", nargs="*", metavar="PIECE", help="what to measure (default: all)")
    parser.add_argument("--list", action="store_true", help="list the pieces and exit")
    parser.add_argument("--quick", action="store_true", help="a smoke run: few runs, small counts")
    parser.add_argument(
        "--python", help="the interpreter to install the product for (default: this one's base)"
    )
    parser.add_argument("--runs", type=int, help="runs of each side, for every repeated figure")
    parser.add_argument("--passes", type=int, help="daemon passes per run (gfd-daemon)")
    parser.add_argument(
        "--changes", type=int, help="changes for propagation (nfd-propagation, nfd-lite-fake)"
    )
    parser.add_argument(
        "--nodes", type=lambda s: [int(n) for n in s.split(",")], help="N for nfd-scale, e.g. 100,200"
    )
    parser.add_argument("--scale-runs", type=int, help="rounds of each side per N (nfd-scale)")
    parser.add_argument("--steady-window", type=float, help="seconds of steady state measured (nfd-scale)")
    parser.add_argument("--flood-files", type=int, help="files in the flooded directory (nfd-flood)")
    parser.add_argument("--kopf-python", help="an interpreter with kopf installed (nfd-lite-clients)")
    parser.add_argument(
        "--policy", type=Path, help="the admission policy file to measure (policy-cost; default: rbac/'s)"
    )
    parser.add_argument("--policy-patches", type=int, help="writer PATCHes per run and Node (policy-cost)")
    return parser.parse_args(argv)


def settings(args: argparse.Namespace) -> Settings:
    s = Settings(**vars(QUICK)) if args.quick else Settings()
    if args.runs:
        s.runs = s.daemon_runs = s.start_runs = s.policy_runs = args.runs
    options = ("passes", "changes", "nodes", "scale_runs", "steady_window", "flood_files", "kopf_python")
    for name in (*options, "policy", "policy_patches"):
        if getattr(args, name) is not None:
            setattr(s, name, getattr(args, name))
    return s


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    known = PIECES | EXTRA
    if args.list:
        for name, (what, _) in known.items():
            print(f"{name:<22}{what}{'' if name in PIECES else ' (not in all)'}")
        return 0
    if unknown := [p for p in args.pieces if p not in known]:
        print(f"figures.py: error: unknown piece {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    chosen = args.pieces or list(PIECES)
    began = time.monotonic()
    try:
        installed = install(args.python)
    except InstallError as err:
        print(f"figures.py: error: {err}", file=sys.stderr)
        return 1
    results: list[Figure] = []
    failed: list[str] = []
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        context = Context(installed, settings(args), stack)
        for name in chosen:
            print(f"... {name}: {known[name][0]}", file=sys.stderr, flush=True)
            started = time.monotonic()
            try:
                results += known[name][1](context)
            except Exception as err:  # one piece failing leaves the others' figures
                traceback.print_exc()
                failed.append(f"{name} ({type(err).__name__}: {err})")
                if context.started_cluster is not None:
                    context.started_cluster.keep_logs = True
            print(f"    {name} took {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    versions = {
        "gfd": _go_module_version("nvidia-gfd", "github.com/NVIDIA/k8s-device-plugin"),
        "nfd": _go_module_version("nfd", "sigs.k8s.io/node-feature-discovery"),
        "kube": _kube_version(),
    }
    print(
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {_git()}, {os.cpu_count()} CPUs, "
        f"load average {load_before[0]:.2f} before and {os.getloadavg()[0]:.2f} after; "
        f"{'quick smoke ' if args.quick else ''}run of {', '.join(args.pieces) or 'every piece'} in "
        f"{time.monotonic() - began:.0f} s."
    )
    print(installed.describe() + ".")
    print(
        "Each cell: minimum / median of the runs (one value: one measurement); ratios ours / theirs of the "
        "minima / of the medians.\n"
    )
    for table, (title, peer) in TABLES.items():
        rows = [f for f in results if f.table == table]
        if rows:
            print(markdown(title.format(**versions), peer, rows) + "\n")
    if failed:
        print("Not measured: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
