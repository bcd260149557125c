"""``python -m tests.node``: bring the test node up by hand, to look around; Ctrl-C sweeps it.

Prints the admin kubeconfig (``kubectl --kubeconfig=...`` works from the host) and the log directory;
``--with-image`` also imports the project image built by scripts/build-image.sh."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

from tests.node import images
from tests.node.cluster import WORKDIR, NodeCluster, what_is_missing, why_not_runnable


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.node", description=__doc__)
    parser.add_argument("--with-image", action="store_true", help="import localhost/gpu-labeller:dev")
    parser.add_argument(
        "--workdir", type=Path, default=WORKDIR, help=f"the node's directory (default {WORKDIR})"
    )
    args = parser.parse_args()
    if reason := why_not_runnable() or what_is_missing():
        print(f"tests.node: {reason}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with NodeCluster(args.workdir) as cluster:
        if args.with_image:
            archive = images.export_project_image(cluster.workdir / "images" / "gpu-labeller.tar")
            cluster.import_image(archive)
        print(f"node {cluster.node} Ready in {cluster.started_in:.1f} s", flush=True)
        print(f"kubeconfig: {cluster.admin_kubeconfig}", flush=True)
        print(f"logs: {cluster.workdir / 'logs'}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
