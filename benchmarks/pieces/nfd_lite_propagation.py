"""nfd-lite alone on the fake API server (tests/apiserver): a feature file renamed into place -> the label
in the server's store, p50 and p99.

Each change writes a temp file and renames it over ``gfd`` (what gfd does); the clock starts just before
the rename and stops when the fake server's store holds the new value (woken by the store's own
condition, no polling). Targets: p50 <= 10 ms, p99 <= 50 ms. The same procedure on the real
kube-apiserver, beside NFD, is nfd_compare.py's (nfd-propagation); this one shows what the test double hides.
Changes come every 20 ms or so, far faster than the writer's default write rate (a burst of 10, then 1
a second) lets them out, so the rate is lifted here: this measures the path from a file to the label,
not the token bucket.
"""

from __future__ import annotations

import time

from benchmarks.support.fake_server import Bench
from benchmarks.support.install import Installed
from benchmarks.support.measure import Figure, percentile

KEY = "nvidia.com/gpu.machine"
PROFILE_TEXT = "nvidia.com/gpu.present=true\nnvidia.com/gpu.count=8\n"


def measure(installed: Installed, changes: int) -> tuple[list[float], float]:
    """(sorted ms from rename to label, the writer's peak RSS in MiB after the changes)."""
    bench = Bench(installed, "--write-rate", "1000", "--write-burst", "1000")
    try:
        bench.write(f"{PROFILE_TEXT}{KEY}=warmup\n")
        if not bench.wait_label(KEY, "warmup", 60):
            raise RuntimeError("nfd-lite on the fake API server did not label its Node")
        samples = []
        for i in range(changes + 5):
            temp = bench.features / ".gfd.tmp"
            temp.write_text(f"{PROFILE_TEXT}{KEY}=v{i}\n")
            started = time.perf_counter()
            temp.rename(bench.features / "gfd")
            if not bench.wait_label(KEY, f"v{i}"):
                raise RuntimeError(f"change {i} never reached the fake API server")
            if i >= 5:  # the first few warm caches and connections
                samples.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)  # let the writer see its own watch event before the next change
        return sorted(samples), bench.peak_rss_mib()
    finally:
        bench.close()


def figures(installed: Installed, *, changes: int) -> list[Figure]:
    samples, rss = measure(installed, changes)
    what = f"nfd-lite on the fake API server, {len(samples)} changes: file renamed in -> label"
    return [
        Figure(
            "alone",
            f"{what}, p50",
            "ms",
            [percentile(samples, 0.5)],
            digits=2,
            note="nfd-lite propagation targets: p50 <= 10 ms, p99 <= 50 ms.",
        ),
        Figure("alone", f"{what}, p99", "ms", [percentile(samples, 0.99)], digits=2),
        Figure(
            "alone", "nfd-lite peak RSS on the fake API server (kubeconfig mode), after them", "MiB", [rss]
        ),
    ]
