"""Every figure of the README's benchmark tables, in one run, as Markdown tables.

    python -m benchmarks [--quick] [PIECE ...]      (as root, from the repository root; default: all)

The product runs as the image installs it (a regular, byte-compiled install of the working tree into a
private virtual environment, cached by a hash of the sources: benchmarks/support/install.py) with the
chart's arguments (benchmarks/support/chart.py). Ours and the peer alternate, run for run; each figure is
the minimum and the median of its runs beside the peer's from the same run, and the ratios ours / theirs
of the minima and of the medians. benchmarks/README.md says what each figure is and how it is measured.
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
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.catalogue import EXTRA, PIECES, QUICK, TABLES, Context, Settings
from benchmarks.support.install import InstallError, install
from benchmarks.support.measure import Figure, markdown
from benchmarks.support.paths import ROOT

PROG = "python -m benchmarks"


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


def _pieces_listing() -> str:
    """One line per piece, in the order a full run takes them; the on-demand ones marked."""
    return "\n".join(
        f"{name:<22}{what}{'' if name in PIECES else ' (not in all)'}"
        for name, (what, _) in (PIECES | EXTRA).items()
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        epilog="pieces:\n" + "\n".join(f"  {line}" for line in _pieces_listing().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pieces", nargs="*", metavar="PIECE", help="what to measure (default: all)")
    parser.add_argument("--list", action="store_true", help="list the pieces and exit")
    parser.add_argument(
        "--install-only",
        action="store_true",
        help="install the product as a run would (or find it installed), say which, and exit",
    )
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
    parser.add_argument("--fleet-nodes", type=int, help="Nodes of the simulated fleet (fleet-scale; 1000)")
    parser.add_argument(
        "--writers", type=int, dest="fleet_writers", help="real writers per side (fleet-scale; 300)"
    )
    parser.add_argument("--fleet-steady", type=float, help="seconds of steady state (fleet-scale; 300)")
    parser.add_argument("--fleet-churn", type=float, help="seconds of 1%%/minute churn (fleet-scale; 180)")
    return parser.parse_args(argv)


def settings(args: argparse.Namespace) -> Settings:
    s = Settings(**vars(QUICK)) if args.quick else Settings()
    if args.runs:
        s.runs = s.daemon_runs = s.start_runs = s.policy_runs = args.runs
    options = ("passes", "changes", "nodes", "scale_runs", "steady_window", "flood_files", "kopf_python")
    for name in (
        *options,
        "policy",
        "policy_patches",
        "fleet_nodes",
        "fleet_writers",
        "fleet_steady",
        "fleet_churn",
    ):
        if getattr(args, name) is not None:
            setattr(s, name, getattr(args, name))
    return s


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    known = PIECES | EXTRA
    if args.list:
        print(_pieces_listing())
        return 0
    if unknown := [p for p in args.pieces if p not in known]:
        print(
            f"{PROG}: error: unknown piece{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"the pieces are {', '.join(known)}",
            file=sys.stderr,
        )
        return 2
    chosen = args.pieces or list(PIECES)
    began = time.monotonic()
    try:
        installed = install(args.python)
    except InstallError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    if args.install_only:
        print(installed.describe())
        return 0
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
