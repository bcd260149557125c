"""Peak resident memory (VmHWM) of the running writer, and of the client options it was chosen from.

    .venv/bin/python benchmarks/nfd_lite_rss.py [--kopf-python /path/to/scratch-venv/bin/python]

1. The real writer (``python -m nfd_lite``, kubeconfig mode, which loads more of the client than
   in-cluster mode) after 50 label changes and a watch renewal. Target: <= 50 MiB.
   With ``--flood``, instead: the writer reading two feature directories (the chart's hostPath mode),
   each filled to the default caps (1,000 files, 128 KiB) in the way that costs it most memory, rescanned
   a few times: once with short invalid lines (every line a rejection), once with short distinct labels.
   The chart limits the container to 128 MiB.
2. Each client option doing the writer's work (GET its Node, one merge PATCH), in a fresh interpreter:
   CoreV1Api; raw ApiClient.call_api after a plain ``import kubernetes``; raw call_api with nfd-lite's
   light import (what the writer does); and, if --kopf-python names an interpreter with kopf installed
   (a scratch venv: kopf is not a dependency), a minimal kopf operator watching only this Node.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _nfd_lite_common import NODE, ROOT, Bench

FINISH = """
import time
for line in open('/proc/self/status'):
    if line.startswith('VmHWM:'):
        print(int(line.split()[1]))
"""
OPTIONS = {
    "CoreV1Api": """
import kubernetes, sys
kubernetes.config.load_kube_config(sys.argv[1])
api = kubernetes.client.CoreV1Api()
node = api.read_node(sys.argv[2])
api.patch_node(sys.argv[2], {"metadata": {"labels": {"nvidia.com/rss": "corev1"},
                              "annotations": {"gpu-labeller.io/owned-labels": "nvidia.com/rss"}}},
               field_manager="nfd-lite")
""",
    "raw call_api, plain import": """
import kubernetes, sys
from pathlib import Path
from nfd_lite.client import NodeApi
from nfd_lite.kubeconfig import kubeconfig_connection
api = NodeApi(kubeconfig_connection(Path(sys.argv[1])), sys.argv[2])
node = api.get_node()
api.patch_node({"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                             "labels": {"nvidia.com/rss": "raw"},
                             "annotations": {"gpu-labeller.io/owned-labels": "nvidia.com/rss"}}})
""",
    "raw call_api, light import (nfd-lite)": """
import sys
from pathlib import Path
from nfd_lite.cli import _light_kubernetes_import
_light_kubernetes_import()
from nfd_lite.client import NodeApi
from nfd_lite.kubeconfig import kubeconfig_connection
api = NodeApi(kubeconfig_connection(Path(sys.argv[1])), sys.argv[2])
node = api.get_node()
api.patch_node({"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                             "labels": {"nvidia.com/rss": "light"},
                             "annotations": {"gpu-labeller.io/owned-labels": "nvidia.com/rss"}}})
""",
}
KOPF = """
import os, sys
kubeconfig, node = sys.argv[1], sys.argv[2]
os.environ["KUBECONFIG"] = kubeconfig  # read when the kubernetes client is imported, so before kopf
import asyncio, threading, time, kopf

@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.posting.enabled = False          # no Events
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gpu-labeller.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="gpu-labeller.io")
    try:
        settings.watching.field_selectors = {"metadata.name": node}   # kopf >= 1.45 only
    except AttributeError:
        pass

@kopf.on.event("nodes", field="metadata.name", value=node)
def seen(patch, **_):
    patch.metadata.labels["nvidia.com/rss"] = "kopf"
    print("handled", file=sys.stderr)

def stop_later(stop):
    time.sleep(15)
    stop.set_result(None)

loop = asyncio.new_event_loop()
stop = loop.create_future()
threading.Thread(target=stop_later, args=(stop,), daemon=True).start()
try:
    loop.run_until_complete(kopf.operator(standalone=True, clusterwide=True, stop_flag=stop))
except Exception as err:
    print("kopf:", type(err).__name__, err, file=sys.stderr)
"""


def run_option(python: str, code: str, kubeconfig: Path) -> str:
    result = subprocess.run([python, "-c", code + FINISH, str(kubeconfig), NODE],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        return f"failed: {result.stderr.strip().splitlines()[-1:] or result.returncode}"
    note = " (handler ran)" if "handled" in result.stderr else ""
    return f"{int(lines[-1]) / 1024:.1f} MiB{note}"


FLOOD_FILES = 1000  # the default cap on files read per directory
FLOOD_BYTES = 128 * 1024  # the default cap on bytes read per directory
# The bench's own label: its key sorts before every flooding one, so the label cap never drops it.
MARKER = "feature.node.kubernetes.io/0-rescan"
FLOODS = {
    # Every line a rejection (the name "-" is not a valid label name): as many rejections as the caps let in.
    "invalid lines": lambda file, line: "-\n",
    # Every line a distinct, valid label, as short as one can be (a bare key means "true").
    "distinct labels": lambda file, line: f"z{file:03d}{line:02d}\n",
}


def flood(directory: Path, line: Callable[[int, int], str]) -> None:
    """``directory`` filled to the default caps: 1,000 files (long names, as each rejection names its
    file) sharing 128 KiB of lines made by ``line``."""
    per_file = (FLOOD_BYTES - 1024) // FLOOD_FILES  # leaves room for the writer's own file
    for file in range(FLOOD_FILES):
        text, number = "", 0
        while len(text) + len(line(file, number)) <= per_file:
            text += line(file, number)
            number += 1
        # Named to sort after the writer's own file "gfd", which the file cap must not push out.
        (directory / (f"z{file:04d}-" + "x" * 200)).write_text(text)


def flooded_peak(name: str, line: Callable[[int, int], str], rescans: int) -> float:
    """Peak RSS (MiB) of the writer with two flooded directories, after ``rescans`` rescans."""
    second = Path(tempfile.mkdtemp(prefix="nfd-lite-bench-flood-"))
    bench = Bench("--features-dir", str(second), "--log-level", "error")
    try:
        bench.write(f"{MARKER}=start\n")
        assert bench.wait_label(MARKER, "start", 30), "writer did not start"
        flood(bench.features, line)
        flood(second, line)
        for i in range(rescans):
            bench.write(f"{MARKER}=v{i}\n")  # one rescan each
            assert bench.wait_label(MARKER, f"v{i}", 120), f"{name}: no rescan"
        return bench.peak_rss_kib() / 1024
    finally:
        bench.close()
        shutil.rmtree(second, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kopf-python", help="python of a scratch venv with kopf installed")
    parser.add_argument("--flood", action="store_true", help="two flooded directories instead")
    parser.add_argument("--rescans", type=int, default=3, help="rescans of the flooded directories")
    args = parser.parse_args()
    if args.flood:
        for name, line in FLOODS.items():
            peak = flooded_peak(name, line, args.rescans)
            print(f"two directories flooded with {name}: peak RSS {peak:.1f} MiB (chart limit 128 MiB)")
        return

    bench = Bench("--watch-timeout", "3")
    try:
        for i in range(50):
            bench.write(f"nvidia.com/gpu.count=8\nnvidia.com/gpu.machine=v{i}\n")
            assert bench.wait_label("nvidia.com/gpu.machine", f"v{i}", 30), "writer did not apply a change"
        time.sleep(4)  # one watch renewal
        peak = bench.peak_rss_kib() / 1024
        print(f"nfd-lite writer (kubeconfig mode, 50 changes): peak RSS {peak:.1f} MiB (target <= 50 MiB)")
        kubeconfig = bench.tmp / "kubeconfig"
        for name, code in OPTIONS.items():
            print(f"{name}: peak RSS {run_option(sys.executable, code, kubeconfig)}")
        if args.kopf_python:
            admin = bench.server.write_kubeconfig(bench.tmp / "admin", bench.server.admin_token())
            print(
                f"kopf operator (standalone, one node): peak RSS {run_option(args.kopf_python, KOPF, admin)}"
            )
    finally:
        bench.close()


if __name__ == "__main__":
    main()
