"""CPU per pass and peak memory: our gfd against NVIDIA's gpu-feature-discovery (a benchmark, on demand).

    scripts/peers/build.sh nvidia-mock-nvml nvidia-gfd
    .venv/bin/python benchmarks/gfd_vs_nvidia.py [--passes 60] [--oneshots 5]

Both programs label the same simulated node through the same mock NVML C library (NVIDIA's go-nvml
DGX A100, 8 GPUs; once whole, once with 7x 1g MIG devices per GPU under the mixed strategy), so
NVML costs the same for both. For each program and machine it measures:

- oneshot: one `--oneshot` run, start to exit (median CPU of N runs, highest peak RSS);
- daemon: the daemon at a 200 ms sleep interval for P passes after its first (passes counted by the
  mock library, which logs every nvmlInit), then stopped with SIGTERM: CPU per steady-state pass
  (the process's CPU time from /proc between the start of pass 2 and of pass P+2, so start-up is
  not counted) and peak RSS over the whole run.

CPU is user + system time; a oneshot's comes from wait4(), as does peak RSS (the kernel's
ru_maxrss). Prints a table and our/NVIDIA ratios (below 1: ours uses less).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.parity import peers  # noqa: E402  (where the peers are and the environment they need)

INTERVAL = "200ms"
MACHINES = {
    "8x A100, whole": ("", "none"),
    "8x A100, MIG 7x 1g": ("0,0,0,0,0,0,0", "mixed"),
}


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    peak_rss_mib: float


def _command(program: str, out: Path, strategy: str, daemon: bool) -> list[str]:
    mode = ["--sleep-interval", INTERVAL] if daemon else ["--oneshot"]
    if program == "nvidia":
        return [str(peers.NVIDIA_GFD), "--no-timestamp", "--use-node-feature-api=false",
                "--device-discovery-strategy=nvml", f"--output-file={out}",
                f"--mig-strategy={strategy}", *mode]  # fmt: skip
    return [str(ROOT / ".venv/bin/gfd"), "--backend", "nvml", "--output-file", str(out),
            f"--mig-strategy={strategy}", *mode]  # fmt: skip


def _wait(proc: subprocess.Popen[bytes]) -> Usage:
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Usage(ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024)


def oneshot(program: str, env: dict[str, str], strategy: str, tmp: Path) -> Usage:
    proc = subprocess.Popen(_command(program, tmp / f"{program}.labels", strategy, False), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    usage = _wait(proc)
    if proc.returncode != 0:
        sys.exit(f"{program} --oneshot failed (exit {proc.returncode})")
    return usage


def daemon(program: str, env: dict[str, str], strategy: str, passes: int, tmp: Path) -> Usage:
    log = tmp / f"{program}.inits"
    log.unlink(missing_ok=True)
    env = env | {"MOCK_NVML_INIT_LOG": str(log)}
    proc = subprocess.Popen(_command(program, tmp / f"{program}.daemon.labels", strategy, True), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + passes * 2 + 30
    marks = {}
    for target in (2, passes + 2):  # the start of pass 2 (start-up done) and of pass P+2
        while _count(log) < target:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit(f"{program} daemon stopped or stalled after {_count(log)} passes")
            time.sleep(0.005)
        marks[target] = _cpu_s(proc.pid)
    proc.send_signal(signal.SIGTERM)
    usage = _wait(proc)
    return Usage((marks[passes + 2] - marks[2]) / passes, usage.peak_rss_mib)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _count(log: Path) -> int:
    try:
        return log.read_text().count("\n")
    except FileNotFoundError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passes", type=int, default=60, help="daemon passes per program (default 60)")
    parser.add_argument("--oneshots", type=int, default=5, help="oneshot runs per program (default 5)")
    args = parser.parse_args()
    if missing := peers.missing():
        sys.exit(f"not built: {', '.join(map(str, missing))}; run {peers.BUILD_COMMAND}")

    print(f"load average {os.getloadavg()[0]:.1f}; daemon at {INTERVAL}, {args.passes} passes")
    print(f"{'machine':<22}{'mode':<9}{'':<8}{'ours':>12}{'NVIDIA':>12}{'ours/NVIDIA':>13}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for name, (mig, strategy) in MACHINES.items():
            env = peers.mock_env("dgxa100", mig)
            results: dict[str, dict[str, Usage]] = {"oneshot": {}, "daemon": {}}
            for program in ("ours", "nvidia"):
                runs = [oneshot(program, env, strategy, tmp) for _ in range(args.oneshots)]
                results["oneshot"][program] = Usage(
                    statistics.median(u.cpu_s for u in runs), max(u.peak_rss_mib for u in runs)
                )
                results["daemon"][program] = daemon(program, env, strategy, args.passes, tmp)
            for mode, by in results.items():
                ours, theirs = by["ours"], by["nvidia"]
                cpu = "CPU ms" if mode == "oneshot" else "CPU ms/pass"
                print(f"{name:<22}{mode:<9}{cpu:<12}{ours.cpu_s * 1000:>8.1f}{theirs.cpu_s * 1000:>12.1f}"
                      f"{ours.cpu_s / theirs.cpu_s:>13.2f}")  # fmt: skip
                print(f"{'':<22}{'':<9}{'peak MiB':<12}{ours.peak_rss_mib:>8.1f}{theirs.peak_rss_mib:>12.1f}"
                      f"{ours.peak_rss_mib / theirs.peak_rss_mib:>13.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
