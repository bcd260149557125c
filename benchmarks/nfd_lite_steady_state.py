"""Steady-state API load: requests and writes per node per hour while the feature files do not change.

    .venv/bin/python benchmarks/nfd_lite_steady_state.py [--window 60] [--short-window 20]

Phase 1 runs the writer with its defaults (one watch request lasts --watch-timeout=1800 s, the
directories are rescanned every 60 s) and counts every request it makes during a measured window once
its labels are in place. Phase 2 shortens the watch to 5 s and the rescan to 1 s and rewrites the file
with identical content every second, to show what each renewal and each rescan costs. Extrapolation:
requests/hour = (requests in window) * 3600 / window, next to the structural figure 3600 / watch-timeout
(each watch renewal is one request; bookmarks arrive on the open stream and cost none).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from _nfd_lite_common import Bench

CONTENT = "nvidia.com/gpu.count=8\nnvidia.com/gpu.product=H100\nfeature.node.kubernetes.io/gpu=true\n"


def measure(window: float, *writer_args: str, rewrite: bool = False) -> tuple[Counter[str], int]:
    bench = Bench(*writer_args, bookmark_interval=1.0)
    try:
        bench.write(CONTENT)
        assert bench.wait_label("nvidia.com/gpu.product", "H100", 30), "writer did not start"
        time.sleep(2.0)  # let the first watch settle
        start = len(bench.server.requests)
        end = time.monotonic() + window
        while time.monotonic() < end:
            if rewrite:
                bench.write(CONTENT)  # an event, same content
            time.sleep(1.0)
        seen = [r for r in bench.server.requests[start:] if r.user is not None]
        kinds: Counter[str] = Counter()
        for r in seen:
            kind = "PATCH" if r.method == "PATCH" else "WATCH" if r.query.get("watch") == "true" else \
                "LIST" if r.path == "/api/v1/nodes" else "GET"  # fmt: skip
            kinds[kind] += 1
        return kinds, len(seen)
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--short-window", type=float, default=20.0)
    args = parser.parse_args()

    kinds, total = measure(args.window)
    per_hour = total * 3600 / args.window
    print(f"defaults, {args.window:.0f} s window: {total} requests {dict(kinds)}")
    print(f"  -> {per_hour:.1f} requests/hour measured; structural: 3600/1800 = 2 watch renewals/hour")

    kinds, total = measure(args.short_window, "--watch-timeout", "5", "--resync-interval", "1", rewrite=True)
    print(f"--watch-timeout 5 --resync-interval 1, identical rewrite each second, {args.short_window:.0f}s:")
    print(f"  {total} requests {dict(kinds)}; expected ~{args.short_window / 5:.0f} watch renewals only")


if __name__ == "__main__":
    main()
