"""What every benchmark here shares: reading a process's CPU time and peak memory, running ours and the
peer in alternation, and a figure (its samples, minimum and median, the ratio ours / theirs) as a row of a
Markdown table."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# ---- one process ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process, all its threads.

    Two readings, each a lower bound: /proc/PID/stat counts the threads that have exited too but is cut
    to clock ticks (10 ms), each live thread's schedstat is exact (ns) but forgets exited threads. The
    larger one is within 10 ms of the truth; for a process whose threads all live (the daemons measured
    pass by pass) the exact one is taken."""
    return max(_stat_seconds(pid), _schedstat_seconds(pid))


def thread_cpu_seconds(pid: int) -> float:
    """The exact CPU time of a process's live threads (for differences over a window)."""
    return _schedstat_seconds(pid)


def _stat_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _schedstat_seconds(pid: int) -> float:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return total / 1e9


# Started by a small interpreter of its own: a child's peak RSS as the kernel reports it (ru_maxrss)
# counts the memory of the process that spawned it, as it was at the spawn; this one holds ~9 MiB,
# below anything measured, where this harness holds several times that.
_SPAWNER = """
import os, sys
null = os.open(os.devnull, os.O_WRONLY)
quiet = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=quiet)
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
"""


@dataclass(frozen=True)
class Usage:
    cpu_s: float  # user + system
    peak_rss_mib: float
    status: int


def run_to_end(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> Usage:
    """Run ``argv`` (an absolute path first) to its end, output discarded: its CPU and peak RSS from
    wait4(). The small spawner runs with -I -S, so the variables in ``env`` reach only the program."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _SPAWNER, *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, check=True)  # fmt: skip
    status, cpu, rss_kib = done.stdout.split()
    return Usage(float(cpu), int(rss_kib) / 1024, int(status))


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmHWM for process {pid}")


# ---- figures ----------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One row: samples of ours and, when there is a peer, of theirs from the same run."""

    table: str  # which README table it belongs to
    what: str
    unit: str
    ours: list[float] = field(default_factory=list)
    theirs: list[float] | None = None
    digits: int = 1
    note: str = ""  # said once under the table

    def cell(self, samples: Sequence[float]) -> str:
        if not samples:
            return "-"
        if len(samples) == 1:
            return f"{samples[0]:.{self.digits}f} {self.unit}".rstrip()
        low, middle = min(samples), statistics.median(samples)
        return f"{low:.{self.digits}f} / {middle:.{self.digits}f} {self.unit}".rstrip()

    def ratio(self) -> str:
        if not self.theirs or not self.ours:
            return "-"
        pairs = [(min(self.ours), min(self.theirs))]
        if len(self.ours) > 1 or len(self.theirs) > 1:
            pairs.append((statistics.median(self.ours), statistics.median(self.theirs)))
        return " / ".join(ratio(ours, theirs) for ours, theirs in pairs)

    def runs(self) -> str:
        counts = {len(self.ours)} | ({len(self.theirs)} if self.theirs is not None else set())
        return "/".join(str(n) for n in sorted(counts))


def ratio(ours: float, theirs: float) -> str:
    if theirs == 0:
        return "0" if ours == 0 else "inf"
    return f"{ours / theirs:.2f}"


def markdown(title: str, peer: str | None, figures: Iterable[Figure]) -> str:
    """A Markdown table: min / median of each (one value where there was one sample), and the ratios of
    the minima and of the medians."""
    rows = list(figures)
    if peer is None:
        lines = ["| what | runs | min / median |", "|---|---|---|"]
        lines += [f"| {f.what} | {f.runs()} | {f.cell(f.ours)} |" for f in rows]
    else:
        lines = [
            f"| what | runs | ours: min / median | {peer}: min / median | ours / theirs: min / median |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {f.what} | {f.runs()} | {f.cell(f.ours)} | {f.cell(f.theirs or [])} | {f.ratio()} |"
            for f in rows
        ]
    notes = [f"- {f.note}" for f in rows if f.note]
    return "\n".join([f"**{title}**", "", *lines, *(["", *notes] if notes else [])])


# ---- alternation ------------------------------------------------------------------------------------


Run = Callable[[], dict[str, float]]


def interleaved(runs: int, ours: Run, theirs: Run) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``runs`` runs of each, alternating, the one going first swapping every round (so neither always
    meets the other's leftovers in caches); each run returns named values, collected per name."""
    got: tuple[dict[str, list[float]], dict[str, list[float]]] = ({}, {})
    for i in range(runs):
        order = ((0, ours), (1, theirs)) if i % 2 == 0 else ((1, theirs), (0, ours))
        for side, run in order:
            for name, value in run().items():
                got[side].setdefault(name, []).append(value)
    return got


def repeated(runs: int, run: Run) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {}
    for _ in range(runs):
        for name, value in run().items():
            got.setdefault(name, []).append(value)
    return got


def percentile(ordered: Sequence[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]
