"""gfd's daemon on its own, as the chart runs it (the installed product, --metrics-address on): peak RSS
(VmHWM) after a few seconds of fast passes, and how often it rewrites its feature file when nothing
changes (with a long --expiry there must be no rewrite after the first):

- the mock backend on a shipped profile (profiles/dgx-a100-mig.yaml), as on a GPU-less test cluster;
- the NVML backend on a node with no NVML library (no driver yet: --fail-on-init-error=false, the chart's
  default, keeps it running and retrying).
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

from benchmarks.support.chart import GFD_ENV, gfd_args
from benchmarks.support.install import Installed
from benchmarks.support.measure import Figure, peak_rss_mib, repeated
from benchmarks.support.paths import ROOT

PROFILE = ROOT / "profiles" / "dgx-a100-mig.yaml"
CASES = {  # name -> (backend, its own arguments)
    "mock backend (dgx-a100-mig)": ("mock", [f"--mock-profile={PROFILE}"]),
    "nvml backend, no NVML library": ("nvml", []),
}


def run_daemon(installed: Installed, case: str, seconds: float, tmp: Path) -> dict[str, float]:
    backend, extra = CASES[case]
    out = tmp / "gfd"
    out.unlink(missing_ok=True)
    chart = gfd_args(
        output=out,
        mig_strategy="none",
        machine_type_file=tmp / "none",
        sleep_interval="20ms",
        backend=backend,
    )
    argv = [str(installed.gfd), *chart, "--expiry=1h", *extra]
    env = installed.env() | GFD_ENV
    env.pop("LD_LIBRARY_PATH", None)  # no NVML library but the mock's own
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    inodes: list[int] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"gfd daemon, {case}: exited early ({proc.returncode})")
            if out.exists() and (not inodes or inodes[-1] != out.stat().st_ino):
                inodes.append(out.stat().st_ino)
            time.sleep(0.005)
        rss = peak_rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return {"rss": rss, "rewrites": max(len(inodes) - 1, 0)}


def figures(installed: Installed, *, runs: int, seconds: float) -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        got = {
            name: repeated(runs, partial(run_daemon, installed, name, seconds, Path(tmp))) for name in CASES
        }
    mock = next(iter(CASES))
    return [
        *(
            Figure("alone", f"gfd daemon peak RSS, {name}, metrics on", "MiB", got[name]["rss"])
            for name in CASES
        ),
        Figure(
            "alone",
            f"gfd daemon file rewrites after the first, {seconds:g} s of 20 ms passes, nothing "
            f"changed ({mock})",
            "",
            got[mock]["rewrites"],
            digits=0,
        ),
    ]
