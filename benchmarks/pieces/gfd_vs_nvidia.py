"""Our gfd beside NVIDIA's gpu-feature-discovery: CPU and peak memory, as the chart runs ours.

Both programs label the same simulated node through the same mock NVML C library (NVIDIA's go-nvml DGX
A100, 8 GPUs; once whole, once with 7x 1g MIG devices per GPU under the mixed strategy), so NVML costs
the same for both. The mock library stands in for the driver that NVIDIA's container toolkit injects into
the pod. Ours is the installed product (benchmarks/support/install.py) with the chart's arguments
(charts/gpu-labeller/templates/daemonset.yaml); NVIDIA's with the same machine-type file, MIG strategy and
config file, writing its feature file as ours does (--use-node-feature-api=false). Runs alternate between
the two.

- oneshot: ``--oneshot``, start to exit: CPU (user + system) and peak RSS from wait4() (spawned by a
  small interpreter of its own, whose memory the kernel would otherwise count in).
- daemon: the daemon as the chart runs it (ours: --metrics-address and a sharing --config-file,
  profiles/sharing/time-slicing.yaml; NVIDIA's has no metrics endpoint and gets the same config file) at
  a short sleep interval: CPU per pass is the CPU its threads used from the start of pass 2 to the start
  of pass P+2 (passes counted by the mock library, which logs every nvmlInit; start-up not counted),
  divided by P; peak RSS (VmHWM) at the end. The peak of both grows over the first 40-80 passes (the
  heap settling), so a run is some 50 passes long; the interval (100 ms by default) barely moves the CPU
  per pass (measured: 100 ms and 500 ms within the run-to-run spread).
- the README's first command (ours alone; its gfd arguments read from README.md): CPU and peak RSS.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from benchmarks.support.chart import GFD_ENV, gfd_args
from benchmarks.support.install import Installed
from benchmarks.support.measure import (
    Figure,
    interleaved,
    peak_rss_mib,
    repeated,
    run_to_end,
    thread_cpu_seconds,
)
from benchmarks.support.paths import ROOT
from tests.parity import peers  # where the peers are and the environment they need

MACHINES = {  # name -> (the mock's MIG layout, the MIG strategy)
    "8 whole A100": ("", "none"),
    "8 A100, MIG 7x 1g mixed": ("0,0,0,0,0,0,0", "mixed"),
}
SHARING = ROOT / "profiles" / "sharing" / "time-slicing.yaml"
MACHINE_TYPE = "NVIDIA DGX A100"


class PeerMissing(Exception):
    """NVIDIA's GFD or the mock NVML library is not built; the message says how to build them."""


@dataclass(frozen=True)
class Setup:
    installed: Installed
    tmp: Path
    machine_type: Path

    def command(self, program: str, strategy: str, *, daemon: str | None) -> list[str]:
        """``daemon``: the sleep interval, or None for --oneshot."""
        out = self.tmp / f"{program}.{'daemon' if daemon else 'oneshot'}.labels"
        if program == "nvidia":
            mode = [f"--sleep-interval={daemon}", f"--config-file={SHARING}"] if daemon else ["--oneshot"]
            return [
                str(peers.NVIDIA_GFD),
                "--no-timestamp",
                "--use-node-feature-api=false",
                f"--output-file={out}",
                f"--mig-strategy={strategy}",
                f"--machine-type-file={self.machine_type}",
                *mode,
            ]
        chart = gfd_args(
            output=out,
            mig_strategy=strategy,
            machine_type_file=self.machine_type,
            sleep_interval=daemon or "60s",
        )
        if daemon:
            return [str(self.installed.gfd), *chart, f"--config-file={SHARING}"]
        # A oneshot run serves no metrics; otherwise the chart's arguments.
        return [str(self.installed.gfd), *(a for a in chart if not a.startswith("--metrics")), "--oneshot"]

    def env(self, program: str, mig: str) -> dict[str, str]:
        env = peers.mock_env("dgxa100", mig)
        if program == "ours":  # what the chart's container gets
            env = self.installed.env(env) | GFD_ENV
        return env


def _setup(installed: Installed, tmp: Path) -> Setup:
    if missing := peers.missing():
        raise PeerMissing(f"not built: {', '.join(map(str, missing))}; run {peers.BUILD_COMMAND}")
    machine_type = tmp / "product_name"
    machine_type.write_text(MACHINE_TYPE + "\n")
    return Setup(installed, tmp, machine_type)


def oneshot(setup: Setup, program: str, machine: str) -> dict[str, float]:
    mig, strategy = MACHINES[machine]
    usage = run_to_end(setup.command(program, strategy, daemon=None), setup.env(program, mig))
    if usage.status != 0:
        raise RuntimeError(f"{program} --oneshot on {machine} failed (exit {usage.status})")
    return {"cpu_ms": usage.cpu_s * 1000, "rss": usage.peak_rss_mib}


def _inits(log: Path) -> int:
    try:
        return log.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def daemon(setup: Setup, program: str, machine: str, passes: int, interval: str) -> dict[str, float]:
    mig, strategy = MACHINES[machine]
    log = setup.tmp / f"{program}.inits"
    log.unlink(missing_ok=True)
    env = setup.env(program, mig) | {"MOCK_NVML_INIT_LOG": str(log)}
    proc = subprocess.Popen(
        setup.command(program, strategy, daemon=interval),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60 + passes * 5
        marks = {}
        for target in (2, passes + 2):  # the start of pass 2 (start-up done) and of pass P+2
            while _inits(log) < target:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{program} daemon on {machine} stopped or stalled at pass {_inits(log)}"
                    )
                time.sleep(0.002)
            marks[target] = thread_cpu_seconds(proc.pid)
        rss = peak_rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"cpu_ms": (marks[passes + 2] - marks[2]) / passes * 1000, "rss": rss}


def oneshot_figures(installed: Installed, *, runs: int) -> list[Figure]:
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        setup = _setup(installed, Path(tmp))
        for machine in MACHINES:
            ours, theirs = interleaved(
                runs,
                partial(oneshot, setup, "ours", machine),
                partial(oneshot, setup, "nvidia", machine),
            )
            figures += [
                Figure("gfd", f"`--oneshot` CPU, {machine}", "ms", ours["cpu_ms"], theirs["cpu_ms"]),
                Figure("gfd", f"`--oneshot` peak RSS, {machine}", "MiB", ours["rss"], theirs["rss"]),
            ]
    return figures


def daemon_figures(installed: Installed, *, runs: int, passes: int, interval: str) -> list[Figure]:
    note = (
        f"Daemon: the chart's arguments with a time-slicing --config-file and --metrics-address, "
        f"--sleep-interval={interval}; CPU of {passes} passes after the first, per pass."
    )
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        setup = _setup(installed, Path(tmp))
        for machine in MACHINES:
            ours, theirs = interleaved(
                runs,
                partial(daemon, setup, "ours", machine, passes, interval),
                partial(daemon, setup, "nvidia", machine, passes, interval),
            )
            figures += [
                Figure(
                    "gfd",
                    f"daemon CPU per pass, {machine}",
                    "ms",
                    ours["cpu_ms"],
                    theirs["cpu_ms"],
                    digits=2,
                    note=note,
                ),
                Figure(
                    "gfd",
                    f"daemon peak RSS as the chart runs it, {machine}",
                    "MiB",
                    ours["rss"],
                    theirs["rss"],
                ),
            ]
            note = ""
    return figures


def readme_first_command() -> list[str]:
    """The gfd arguments of the README's first command, read from the README (it runs in its root)."""
    for line in (ROOT / "README.md").read_text().splitlines():
        _, found, arguments = line.partition(".venv/bin/gfd ")
        if found:
            return shlex.split(arguments)
    raise ValueError("README.md: no `.venv/bin/gfd` command found")


def first_command_figures(installed: Installed, *, runs: int) -> list[Figure]:
    arguments = readme_first_command()

    def run() -> dict[str, float]:
        usage = run_to_end([str(installed.gfd), *arguments], installed.env(), cwd=ROOT)
        if usage.status != 0:
            raise RuntimeError(f"the README's first command failed (exit {usage.status})")
        return {"cpu_ms": usage.cpu_s * 1000, "rss": usage.peak_rss_mib}

    got = repeated(runs, run)
    what = f"the README's first command (`gfd {' '.join(arguments)}`), CPU"
    return [
        Figure(
            "alone", what, "ms", got["cpu_ms"], note="Target for the README's first command: < 250 ms CPU."
        ),
        Figure("alone", "the same, peak RSS", "MiB", got["rss"]),
    ]
