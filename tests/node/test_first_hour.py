"""A new admin's first hour, from the docs alone, on the real node: the commands are the docs' own, read
from the Markdown blocks marked `<!-- first-hour: NAME -->`, and run in order with kubectl and helm as a
newcomer runs them (a shell in the checkout, KUBECONFIG set), from a cluster with nothing of ours on it:

- README "Deploy" (`install`): the RuntimeClass manifest, the GPU-node label, the namespace, `helm
  install`, `rollout status`, `get daemonset`, `get nodes -L`, `helm test --logs`;
- README "Target workloads" (`workloads`): a pod with each selector lands on the node;
- docs/deploy.md "Uninstall" (`uninstall`): pruneLabels, uninstall, the namespace and the label go, and the
  Node is left with exactly the labels it had before.

What a newcomer must substitute is substituted, in the one way docs/real-node.md ("The first hour") says,
and nothing else: the node's name for NODE; the README's from-source chart and image (its `from-source`
block: this checkout's chart, the image scripts/build-image.sh built, under its default repository) for the
release's OCI chart; the node's own product in the product selector.

Prints the newcomer's time to Ready (from `helm install` to the pod Ready and the Node labelled), the
figure docs/real-node.md gives."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART
from tests.deploy.markdown import Block, marked
from tests.kube.controlplane import KUBECTL, ROOT
from tests.kube.helm import TOOLS
from tests.node.cluster import NodeCluster
from tests.node.images import BUSYBOX_IMAGE, PROJECT_IMAGE
from tests.node.release import OWNED_PREFIXES, pod_ready, release_pods, uninstall_pruning
from tests.node.workloads import apply, delete, describe, pod, wait_phase

pytestmark = pytest.mark.timeout(1200)

README = ROOT / "README.md"
DEPLOY = ROOT / "docs" / "deploy.md"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
# The newest major, what a newcomer downloads today (docs: Helm 3 or 4; the other node tests use 3).
HELM = "helm4"
RELEASE = NAMESPACE = "gpu-labeller"
# The docs' placeholders and what stands for them here (docs/real-node.md, "The first hour").
NODE = "NODE"
RELEASE_CHART = ("oci://ghcr.io/gpu-labeller/charts/gpu-labeller", "--version", "X.Y.Z")
REGISTRY = "registry.example.com/gpu-labeller"
BUILT = "localhost/gpu-labeller"  # scripts/build-image.sh's default REPOSITORY
OWNERSHIP = "gpu-labeller.io/owned-labels"
COMMAND_TIMEOUT = 420  # the docs' longest wait is `--timeout=5m`


# ---- the docs' commands, substituted as a newcomer substitutes them ----------------------------------


def install_block() -> Block:
    return marked(README, "install")


def from_source() -> list[str]:
    """The README's `helm install` from a checkout, after the build command that pushes its image."""
    block = marked(README, "from-source")
    assert block.skipped == [], f"README from-source: lines the walk would not run: {block.skipped}"
    build, install = block.commands
    assert build[-1] == "scripts/build-image.sh" and f"REPOSITORY={REGISTRY}" in build, build
    assert install[:2] == ["helm", "install"], install
    return install


@dataclass
class Substitutions:
    node: str

    def __call__(self, command: list[str]) -> list[str]:
        source = from_source()
        chart, sets = source[3], source[source.index("--set") :]
        out: list[str] = []
        i = 0
        while i < len(command):
            if tuple(command[i : i + 3]) == RELEASE_CHART:
                out += [chart, *sets]  # README: "From a checkout instead"
                i += 3
                continue
            out.append(self.node if command[i] == NODE else command[i])
            i += 1
        return [arg.replace(REGISTRY, BUILT) for arg in out]


@dataclass
class Newcomer:
    """A shell in the checkout with KUBECONFIG set, and kubectl and helm on its PATH; what it ran."""

    cluster: NodeCluster
    home: Path
    substitute: Substitutions
    transcript: list[str] = field(default_factory=list)

    def run(self, command: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = self.substitute(command)
        program = {"kubectl": str(KUBECTL), "helm": str(TOOLS.helm(HELM))}[argv[0]]
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.admin_kubeconfig),
            **{f"HELM_{kind}_HOME": str(self.home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
        }
        began = time.monotonic()
        done = subprocess.run(
            [program, *argv[1:]],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        took = time.monotonic() - began
        self.transcript.append(
            f"$ {shlex.join(argv)}   # {took:.1f} s, exit {done.returncode}\n{done.stdout}"
        )
        assert done.returncode == 0, (
            f"`{shlex.join(argv)}` (from `{shlex.join(command)}`) exited {done.returncode}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done


def steps(block: Block, name: str) -> list[tuple[list[str], str | None]]:
    """Every command of ``block`` with its stdin, in order; a line the walk would not run fails."""
    assert block.skipped == [], f"{name}: lines the walk would not run: {block.skipped}"
    return list(zip(block.commands, block.stdin, strict=True))


def columns(table: str) -> list[dict[str, str]]:
    """kubectl's table output, one dict per row by header; empty cells are ''."""
    lines = table.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    names = lines[0].split()
    rows = []
    for line in lines[1:]:
        ends = [*starts[1:], len(line) + 1]
        rows.append({n: line[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)})
    return rows


def output_of(said: dict[str, str], prefix: str) -> str:
    (found,) = [out for command, out in said.items() if command.startswith(prefix)]
    return found


# ---- timing: helm install to the pod Ready and the Node labelled --------------------------------------


class Stopwatch:
    """From ``start`` on, when the release's pod was first Ready and the Node first labelled, polled every
    0.2 s in a thread of its own (so the figure does not depend on when the newcomer looks)."""

    def __init__(self, cluster: NodeCluster) -> None:
        self._cluster = cluster
        self.began = 0.0
        self.ready: float | None = None
        self.labelled: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="first-hour-stopwatch", daemon=True)

    def start(self) -> None:
        self.began = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        while not self._stop.is_set() and (self.ready is None or self.labelled is None):
            with contextlib.suppress(AssertionError, OSError):
                now = time.monotonic() - self.began
                if self.ready is None and any(pod_ready(p) for p in release_pods(self._cluster, RELEASE)):
                    self.ready = now
                labels = self._cluster.labels(self._cluster.node)
                if self.labelled is None and labels.get("nvidia.com/gpu.present") == "true":
                    self.labelled = now
            self._stop.wait(0.2)


# ---- the cluster as a newcomer's is before the first command ------------------------------------------


def selecting_keys() -> set[str]:
    """The labels the chart's default affinity selects a GPU node by."""
    terms = VALUES["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {e["key"] for term in terms["nodeSelectorTerms"] for e in term["matchExpressions"]}


@pytest.fixture
def empty_cluster(node_with_image: NodeCluster, tmp_path: Path) -> Iterator[NodeCluster]:
    """The node with nothing of ours on it: no RuntimeClass, no label that selects it as a GPU node, no
    release namespace (earlier modules of the session leave those); the image built from this checkout
    tagged where the from-source chart pulls it (scripts/build-image.sh tags it so, and the push is this
    import). Whatever this took away is put back afterwards, and what the walk made is removed even when
    it failed half-way."""
    cluster = node_with_image
    cluster.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})
    found = cluster.request("GET", "/apis/node.k8s.io/v1/runtimeclasses/nvidia")
    runtime_class = found.json() if found.status == 200 else None
    if runtime_class:
        cluster.kubectl("delete", "runtimeclass", "nvidia")
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    taken = {k: v for k, v in cluster.labels(cluster.node).items() if k in selecting_keys()}
    if taken:
        cluster.kubectl("label", "node", cluster.node, *(f"{key}-" for key in taken))
    tagged = cluster.ctr("images", "tag", "--force", PROJECT_IMAGE, f"{BUILT}:{APP_VERSION}")
    assert tagged.returncode == 0, tagged.stderr
    empty = cluster.labels(cluster.node)
    yield cluster
    uninstall_pruning(cluster, tmp_path, RELEASE)  # only if the walk stopped before its own removal
    for index in range(len(workload_specs())):
        delete(cluster, "default", f"first-hour-workload-{index}")
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    # Whatever the docs had the admin set (or a failed walk left) goes, so later modules find the node
    # as they would have without this one.
    if added := [key for key in cluster.labels(cluster.node) if key not in empty]:
        cluster.kubectl("label", "node", cluster.node, *(f"{key}-" for key in added))
    cluster.kubectl("delete", "runtimeclass", "nvidia", "--ignore-not-found")
    if runtime_class:
        keep = ("apiVersion", "kind", "handler", "overhead", "scheduling")
        restored = {k: v for k, v in runtime_class.items() if k in keep}
        apply(cluster, {**restored, "metadata": {"name": runtime_class["metadata"]["name"]}})
    if taken:
        cluster.kubectl("label", "node", cluster.node, "--overwrite", *(f"{k}={v}" for k, v in taken.items()))
    cluster.ctr("images", "rm", f"{BUILT}:{APP_VERSION}")


def workload_specs() -> list[dict[str, Any]]:
    """The README's selectors, each a piece of a pod spec."""
    return [d for d in yaml.safe_load_all(marked(README, "workloads").text) if d]


# ---- the tests ----------------------------------------------------------------------------------------


def test_every_line_of_the_first_hour_is_a_command_the_walk_runs() -> None:
    """Offline: a line the walk would skip, or a README whose two installs differ in more than the chart,
    is a step of the docs that the node test does not prove."""
    blocks = {"install": install_block(), "uninstall": marked(DEPLOY, "uninstall")}
    for name, block in blocks.items():
        assert block.commands and block.skipped == [], f"{name}: {block.skipped}"
    (release,) = [c for c in blocks["install"].commands if c[:2] == ["helm", "install"]]
    assert " ".join(RELEASE_CHART) in shlex.join(release)
    # The removal upgrades the release with the chart the reader installed it from, which the README gives
    # as the release's; a checkout's path would be a chart that reader does not have.
    for command in blocks["uninstall"].commands:
        if command[:2] == ["helm", "upgrade"]:
            assert " ".join(RELEASE_CHART) in shlex.join(command), (
                f"docs/deploy.md Uninstall: `{shlex.join(command)}` names another chart than the README's "
                f"install ({' '.join(RELEASE_CHART)})"
            )
    substitute = Substitutions("gpu-1")
    # The README's release install with the from-source chart is its from-source install, word for word.
    assert sorted(substitute(release)) == sorted(substitute(from_source()))
    # Every placeholder of the walk is one the substitutions replace.
    for block in blocks.values():
        for command in block.commands:
            left = [a for a in substitute(command) if re.search(r"X\.Y\.Z|example\.com|^NODE$|<\w+>", a)]
            assert left == [], f"{shlex.join(command)}: placeholders nobody substitutes: {left}"
    assert workload_specs(), "README: no selectors under Target workloads"


def test_a_new_admin_installs_targets_checks_and_removes_it_from_the_docs_alone(
    empty_cluster: NodeCluster, tmp_path: Path
) -> None:
    cluster = empty_cluster
    before = cluster.labels(cluster.node)
    assert not {k for k in before if k.startswith((*OWNED_PREFIXES, "gpu-labeller.io/"))}, before
    newcomer = Newcomer(cluster, tmp_path / "home", Substitutions(cluster.node))
    stopwatch = Stopwatch(cluster)
    began = time.monotonic()
    try:
        # 1. README "Deploy": prerequisites, the install and its checks, as written.
        said: dict[str, str] = {}
        shown = float("nan")
        for command, stdin in steps(install_block(), "README Deploy"):
            if command[:2] == ["helm", "install"]:
                stopwatch.start()
            said[shlex.join(command)] = newcomer.run(command, stdin).stdout
            if command[:3] == ["kubectl", "get", "nodes"]:
                shown = time.monotonic() - stopwatch.began  # the labels are on the reader's screen

        # The rollout waited for the pod; the DaemonSet and the Node say what the docs say they say.
        (daemonset,) = columns(output_of(said, "kubectl -n gpu-labeller get daemonset"))
        assert (daemonset["DESIRED"], daemonset["READY"]) == ("1", "1"), daemonset
        (node,) = columns(output_of(said, "kubectl get nodes -L"))
        assert node["NAME"] == cluster.node
        assert (node["GPU.PRESENT"], node["GPU.COUNT"]) == ("true", "8"), (
            "right after the rollout the Node shows no GPU labels:\n"
            + output_of(said, "kubectl get nodes -L")
        )
        product = node["GPU.PRODUCT"]
        assert product, node
        test_log = output_of(said, "helm test")
        assert f"node {cluster.node} carries nvidia.com/gpu.present=true" in test_log, test_log

        # 2. README "Target workloads": each selector, in a pod, lands on the node. The product is the
        # reader's own: the one `kubectl get nodes -L` showed.
        for index, spec in enumerate(workload_specs()):
            if "nvidia.com/gpu.product" in spec.get("nodeSelector", {}):
                spec["nodeSelector"]["nvidia.com/gpu.product"] = product
            name = f"first-hour-workload-{index}"
            apply(cluster, pod(name, BUSYBOX_IMAGE, ["echo", "landed"], **spec))
            landed = wait_phase(cluster, "default", name, "Succeeded", timeout=120)
            assert landed["spec"]["nodeName"] == cluster.node, describe(cluster, "default", name)
            delete(cluster, "default", name)

        # 3. docs/deploy.md "Uninstall", as written.
        removal = {
            shlex.join(command): newcomer.run(command, stdin).stdout
            for command, stdin in steps(marked(DEPLOY, "uninstall"), "docs/deploy.md Uninstall")
        }
        (pruned,) = columns(output_of(removal, "kubectl get nodes -L"))
        assert (pruned["GPU.PRESENT"], pruned["GPU.PRODUCT"]) == ("", ""), "the prune left labels on the Node"
    finally:
        stopwatch.stop()
        (tmp_path / "transcript.txt").write_text("\n".join(newcomer.transcript))
    walked = time.monotonic() - began

    # Nothing of it is left: the Node has the labels it had, no ownership record, and no object remains.
    node_after = cluster.get_node(cluster.node)["metadata"]
    assert node_after.get("labels") == before, {
        "left": {k: v for k, v in node_after["labels"].items() if before.get(k) != v},
        "gone": sorted(set(before) - set(node_after["labels"])),
    }
    assert OWNERSHIP not in (node_after.get("annotations") or {})
    kinds = "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings"
    left = cluster.kubectl("get", kinds, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name")
    assert left.stdout == "", left.stdout
    assert cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}").status == 404

    assert stopwatch.ready is not None and stopwatch.labelled is not None
    commands = "\n".join(entry.partition("\n")[0] for entry in newcomer.transcript)
    print(
        f"\nfirst hour ({HELM}, {os.cpu_count()} CPUs): helm install -> pod Ready {stopwatch.ready:.1f} s, "
        f"Node labelled {stopwatch.labelled:.1f} s; the docs' commands from helm install to `get nodes -L` "
        f"showing the labels {shown:.1f} s; the whole walk {walked:.1f} s "
        f"(outputs: {tmp_path / 'transcript.txt'})\n{commands}"
    )
