"""nfd-lite alone on the fake API server (tests/apiserver): requests per node per hour while the feature
files do not change.

The writer (installed, the chart's arguments, kubeconfig mode) runs with its defaults (one watch request
lasts --watch-timeout=1800 s, the directories are rescanned every 60 s); every request it makes during a
window, once its labels are in place, is counted and scaled to an hour. The structural figure beside it:
3600 / watch-timeout watch renewals an hour (bookmarks arrive on the open stream and cost none). The real
server's count, beside NFD's, is nfd_compare.py's scale phase (nfd-scale).
"""

from __future__ import annotations

import time
from collections import Counter

from benchmarks.support.fake_server import Bench
from benchmarks.support.install import Installed
from benchmarks.support.measure import Figure

CONTENT = "nvidia.com/gpu.count=8\nnvidia.com/gpu.product=H100\nfeature.node.kubernetes.io/gpu=true\n"


def measure(installed: Installed, window: float) -> Counter[str]:
    """Requests by kind in ``window`` seconds of unchanged files."""
    bench = Bench(installed, bookmark_interval=1.0)
    try:
        bench.write(CONTENT)
        if not bench.wait_label("nvidia.com/gpu.product", "H100", 30):
            raise RuntimeError("nfd-lite on the fake API server did not label its Node")
        time.sleep(2.0)  # let the first watch settle
        start = len(bench.server.requests)
        time.sleep(window)
        kinds: Counter[str] = Counter()
        for r in bench.server.requests[start:]:
            if r.user is None:
                continue
            kinds[
                "PATCH"
                if r.method == "PATCH"
                else "WATCH"
                if r.query.get("watch") == "true"
                else "LIST"
                if r.path == "/api/v1/nodes"
                else "GET"
            ] += 1
        return kinds
    finally:
        bench.close()


def figures(installed: Installed, *, window: float) -> list[Figure]:
    kinds = measure(installed, window)
    return [
        Figure(
            "alone",
            f"nfd-lite on the fake API server: requests per node per hour, {window:g} s of unchanged files",
            "",
            [kinds.total() * 3600 / window],
            note=f"Steady state on the fake server: {dict(kinds) or 'no request'} in the window; "
            "by design 2 watch renewals an hour (3600 / --watch-timeout).",
        ),
    ]
