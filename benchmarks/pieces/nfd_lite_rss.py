"""Peak resident memory (VmHWM) of the client options nfd-lite was chosen from, each doing the writer's
work (GET its Node, one merge PATCH) against the fake API server (tests/apiserver), in a fresh interpreter
of the installed product's environment:

- the official client's CoreV1Api (kubeconfig mode);
- with --kopf-python naming an interpreter with kopf installed (a scratch venv: kopf is no dependency), a
  minimal kopf operator watching only this Node.

nfd-lite's own peak RSS is measured as the chart runs it, on the real server (nfd_compare.py), and on the
fake server (nfd_lite_propagation.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.support.fake_server import NODE, Bench
from benchmarks.support.install import Installed
from benchmarks.support.measure import Figure
from benchmarks.support.paths import ROOT

FINISH = """
for line in open('/proc/self/status'):
    if line.startswith('VmHWM:'):
        print(int(line.split()[1]))
"""
CORE_V1 = """
import kubernetes, sys
kubernetes.config.load_kube_config(sys.argv[1])
api = kubernetes.client.CoreV1Api()
node = api.read_node(sys.argv[2])
owned = {"gpu-labeller.io/owned-labels": "nvidia.com/gpu.rss"}  # the admission policy's record
patch = {"metadata": {"labels": {"nvidia.com/gpu.rss": "corev1"}, "annotations": owned}}
api.patch_node(sys.argv[2], patch, field_manager="nfd-lite")
"""
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
    patch.metadata.labels["nvidia.com/gpu.rss"] = "kopf"
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


def run_option(python: Path | str, code: str, kubeconfig: Path, env: dict[str, str] | None = None) -> float:
    result = subprocess.run(
        [str(python), "-c", code + FINISH, str(kubeconfig), NODE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        last = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
        raise RuntimeError(f"client option failed: {last[0]}")
    return int(lines[-1]) / 1024


def figures(installed: Installed, *, runs: int, kopf_python: str | None = None) -> list[Figure]:
    bench = Bench(installed)
    try:
        kubeconfig = bench.tmp / "kubeconfig"
        core = [run_option(installed.python, CORE_V1, kubeconfig, installed.env()) for _ in range(runs)]
        got = [
            Figure(
                "alone",
                "the official client's CoreV1Api doing the writer's work (GET, PATCH), peak RSS",
                "MiB",
                core,
            )
        ]
        if kopf_python:
            admin = bench.server.write_kubeconfig(bench.tmp / "admin", bench.server.admin_token())
            kopf = [run_option(kopf_python, KOPF, admin) for _ in range(runs)]
            got.append(Figure("alone", "a minimal kopf operator for one Node, peak RSS", "MiB", kopf))
        return got
    finally:
        bench.close()
