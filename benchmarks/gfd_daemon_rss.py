"""Peak resident memory of ``gfd`` in daemon mode (a benchmark, run on demand; target <= 30 MiB).

    .venv/bin/python benchmarks/gfd_daemon_rss.py [--seconds 3]

Runs the daemon as a child process for a few seconds of fast passes and reads
its peak RSS (VmHWM in /proc/<pid>/status), for:

- the mock backend on a shipped profile (the profile loader brings pydantic);
- the NVML backend over the fake NVML library of the tests, when that is
  present. The fake needs pytest and a pydantic profile in the process, which a
  real node does not load, so the harness's own peak (same imports, fake
  installed, no gfd run) is printed too, and the difference is gfd's share;
- the NVML backend with no NVML library (what a node without a driver runs).

It also counts rewrites of the feature file after the first one: with a long
expiry and an unchanged node there must be none.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "dgx-a100-mig.yaml"

FAKE_NVML_CHILD = """
import sys
import pynvml
from gfd.machine_profile import load_machine_profile
from tests.fakes.fake_nvml import FakeNvml
fake = FakeNvml(load_machine_profile(sys.argv[1]))
pynvml._nvmlGetFunctionPointer_cache = {}
pynvml._nvmlLib_refcount = 0
pynvml.nvmlLib = fake
pynvml.CDLL = lambda name, *a, **k: fake
if sys.argv[2] == "harness":
    import signal
    signal.pause()
from gfd.cli import main
sys.exit(main(sys.argv[3:]))
"""


def peak_rss_mib(pid: int) -> tuple[float, float]:
    """(VmHWM, VmRSS) in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmHWM"], fields["VmRSS"]


def run(label: str, cmd: list[str], seconds: float, out: Path | None) -> None:
    with tempfile.TemporaryFile("w+") as log:
        print(f"{label:<44} {measure(cmd, seconds, out, log)}")


def measure(cmd: list[str], seconds: float, out: Path | None, log: IO[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
    inodes: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if out is not None and out.exists():
            ino = out.stat().st_ino
            if not inodes or inodes[-1] != ino:
                inodes.append(ino)
        time.sleep(0.005)
    if proc.poll() is not None:
        log.seek(0)
        return f"exited early ({proc.returncode}): {log.read().strip()[:200]}"
    hwm, rss = peak_rss_mib(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    rewrites = f", rewrites after the first: {len(inodes) - 1}" if out is not None and inodes else ""
    return f"peak {hwm:5.1f} MiB  (now {rss:5.1f} MiB){rewrites}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each daemon runs")
    args = parser.parse_args()
    py = sys.executable
    daemon = ["--sleep-interval", "20ms", "--expiry", "1h"]
    with tempfile.TemporaryDirectory() as tmp:
        run("bare interpreter (python -c pause)", [py, "-c", "import signal; signal.pause()"], 1.0, None)
        out = Path(tmp) / "mock" / "gfd"
        run(
            f"gfd daemon, mock backend ({PROFILE.name})",
            [py, "-m", "gfd", "--backend", "mock", "--mock-profile", str(PROFILE), "-o", str(out), *daemon],
            args.seconds,
            out,
        )
        run(
            "gfd daemon, nvml backend, no NVML library",
            [
                py,
                "-m",
                "gfd",
                "--backend",
                "nvml",
                "--fail-on-init-error=false",
                "-o",
                str(Path(tmp) / "x"),
                *daemon,
            ],
            args.seconds,
            None,
        )
        if (ROOT / "tests" / "fakes" / "fake_nvml.py").exists():
            child = [py, "-c", FAKE_NVML_CHILD, str(PROFILE)]
            run("fake-NVML harness alone (pytest, pydantic)", [*child, "harness"], 2.0, None)
            out = Path(tmp) / "nvml" / "gfd"
            run(
                "gfd daemon, nvml backend over the fake NVML",
                [*child, "run", "--backend", "nvml", "-o", str(out), *daemon],
                args.seconds,
                out,
            )
        else:
            print("fake NVML not found (tests/fakes/fake_nvml.py): skipped")


if __name__ == "__main__":
    main()
