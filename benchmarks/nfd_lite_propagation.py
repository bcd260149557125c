"""Propagation latency: a feature file renamed into place -> the label visible in the API server.

    .venv/bin/python benchmarks/nfd_lite_propagation.py [--changes 200] [--debounce 0.005]

The writer runs as its own process against the in-process fake API server over loopback HTTP. Each
change writes a temp file and renames it over ``gfd`` (what gfd does); the clock starts just before the
rename and stops when the fake server's store holds the new value (woken by the store's own condition,
no polling). Targets: p50 <= 10 ms, p99 <= 50 ms. Changes come every 20 ms or so, far faster than the
writer's default write rate (a burst of 10, then 1 a second) lets them out, so the rate is lifted here:
this measures the path from a file to the label, not the token bucket.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _nfd_lite_common import Bench


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--debounce", default="0.002")
    args = parser.parse_args()
    bench = Bench("--debounce", args.debounce, "--write-rate", "1000", "--write-burst", "1000")
    try:
        bench.write("nvidia.com/gpu.machine=warmup\n")
        assert bench.wait_label("nvidia.com/gpu.machine", "warmup", 30), "writer did not start"
        samples: list[float] = []
        for i in range(args.changes + 5):
            value = f"v{i}"
            temp = bench.features / ".gfd.tmp"
            temp.write_text(f"nvidia.com/gpu.count=2\nnvidia.com/gpu.machine={value}\n")
            started = time.perf_counter()
            temp.rename(bench.features / "gfd")
            assert bench.wait_label("nvidia.com/gpu.machine", value), f"change {i} never arrived"
            if i >= 5:  # the first few warm caches and connections
                samples.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)  # let the writer see its own watch event before the next change
        samples.sort()
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        patches = sum(1 for r in bench.writer_requests() if r.method == "PATCH")
        print(f"changes={len(samples)} debounce={args.debounce}s")
        print(f"p50={p50:.2f} ms  p90={samples[int(len(samples) * 0.9)]:.2f} ms  p99={p99:.2f} ms  "
              f"max={samples[-1]:.2f} ms")  # fmt: skip
        print(f"PATCH requests={patches} (one per change, plus the first)")
        verdict = {True: "met", False: "MISSED"}
        print(f"targets: p50<=10 ms {verdict[p50 <= 10]}, p99<=50 ms {verdict[p99 <= 50]}")
    finally:
        bench.close()


if __name__ == "__main__":
    main()
