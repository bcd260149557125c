"""The chart on the real node: what an admin prepares, installing and removing a release, and the pod it
runs. Releases here use the chart's defaults except the image (built locally, so no registry) and, where
a test says so, the backend."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.deploy.chart import CHART
from tests.kube.controlplane import ROOT
from tests.kube.helm import create_namespace, helm
from tests.node.cluster import NodeCluster
from tests.node.workloads import apply
from tests.waiting import eventually

NAMESPACE = "gpu-labeller"
IMAGE = {"repository": "localhost/gpu-labeller", "tag": "dev"}
MOCK_PROFILE = "profiles/dgx-a100-mig.yaml"  # in the image under /usr/share/gpu-labeller/
MOCK_VALUES: dict[str, Any] = {
    "image": IMAGE,
    "gfd": {"backend": "mock", "extraArgs": [f"--mock-profile=/usr/share/gpu-labeller/{MOCK_PROFILE}"]},
}
# What NFD's worker puts on a node with an NVIDIA PCI device, which the chart's default affinity selects.
NFD_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"
OWNED_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")
HELM = "helm3"
HELM_TIMEOUT = "100s"  # below run_helm's own 120 s limit


def prepare_gpu_node(cluster: NodeCluster, *, runtime_class: bool = True) -> None:
    """What an admin's cluster has before the chart: the `nvidia` RuntimeClass (its handler is the toolkit
    stand-in) and NFD's PCI label on the node."""
    if runtime_class:
        apply(
            cluster,
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"},
                "handler": "nvidia",
            },
        )
    cluster.kubectl("label", "node", cluster.node, f"{NFD_PCI_LABEL}=true", "--overwrite")


def ensure_namespace(cluster: NodeCluster, namespace: str, pod_security: str = "restricted") -> None:
    """``namespace`` as docs/deploy.md prepares it, unless an earlier module on this node made it already."""
    if cluster.request("GET", f"/api/v1/namespaces/{namespace}").status == 404:
        create_namespace(cluster, namespace, pod_security)


def install(
    cluster: NodeCluster,
    tmp: Path,
    release: str,
    values: dict[str, Any],
    *,
    namespace: str = NAMESPACE,
    pod_security: str = "restricted",
) -> None:
    """Into ``namespace``, which enforces ``pod_security`` (made here if it is not there yet)."""
    ensure_namespace(cluster, namespace, pod_security)
    done = helm(
        HELM, cluster, tmp, "install", release, str(CHART), "-n", namespace,
        "--wait", "--timeout", HELM_TIMEOUT, values=values,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"helm install {release}:\n{done.stderr}\n{pod_report(cluster, release, namespace)}"
    )


def upgrade(cluster: NodeCluster, tmp: Path, release: str, *sets: str, namespace: str = NAMESPACE) -> None:
    args = [arg for item in sets for arg in ("--set", item)]
    done = helm(
        HELM, cluster, tmp, "upgrade", release, str(CHART), "-n", namespace, "--reuse-values", *args,
        "--wait", "--timeout", HELM_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"helm upgrade {release} {sets}:\n{done.stderr}\n{pod_report(cluster, release, namespace)}"
    )


def uninstall_pruning(cluster: NodeCluster, tmp: Path, release: str, *, namespace: str = NAMESPACE) -> None:
    """The documented removal: prune the labels (pods replaced by ones that remove them), then uninstall."""
    if helm(HELM, cluster, tmp, "status", release, "-n", namespace).returncode != 0:
        return
    upgrade(cluster, tmp, release, "pruneLabels=true", namespace=namespace)
    # As docs/deploy.md says: helm 3's --wait lets maxUnavailable (here the one) pod be unready.
    cluster.kubectl("rollout", "status", f"daemonset/{release}", "-n", namespace, "--timeout=90s")
    done = helm(
        HELM, cluster, tmp, "uninstall", release, "-n", namespace, "--wait", "--timeout", HELM_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    wait_until(lambda: not release_pods(cluster, release, namespace), 60, f"pods of {release} gone")


def release_pods(cluster: NodeCluster, release: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The DaemonSet's pods of ``release`` (not the `helm test` pod)."""
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/name=gpu-labeller"
    found = cluster.must("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    return [
        p
        for p in found["items"]
        if any(o["kind"] == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))
    ]


def the_pod(cluster: NodeCluster, release: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The release's one pod, once it is Running with every container ready."""
    pods: list[dict[str, Any]] = []

    def ready() -> bool:
        pods[:] = release_pods(cluster, release, namespace)
        return len(pods) == 1 and pod_ready(pods[0])

    wait_until(ready, 90, f"one ready pod of {release}: {pod_report(cluster, release, namespace)}")
    return pods[0]


def pod_ready(pod: dict[str, Any]) -> bool:
    statuses = pod["status"].get("containerStatuses") or []
    return (
        pod["status"].get("phase") == "Running"
        and pod["metadata"].get("deletionTimestamp") is None
        and bool(statuses)
        and all(s["ready"] for s in statuses)
    )


def container_id(pod: dict[str, Any], name: str) -> str:
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)
    return str(status["containerID"]).removeprefix("containerd://")


def restarts(pod: dict[str, Any], name: str) -> int:
    return int(next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)["restartCount"])


def pod_report(cluster: NodeCluster, release: str, namespace: str = NAMESPACE) -> str:
    """The release's pods' statuses and events, for failure messages."""
    try:
        pods = release_pods(cluster, release, namespace)
        events = cluster.must("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    except AssertionError as err:
        return str(err)
    said = [f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message')}" for e in events[-15:]]
    return json.dumps({"pods": [p["status"] for p in pods], "events": said}, indent=1)[-5000:]


def owned(labels: dict[str, str], *, besides: frozenset[str] | set[str] = frozenset()) -> dict[str, str]:
    """The labels under the writer's prefixes, less ``besides`` (labels others set there)."""
    return {k: v for k, v in labels.items() if k.startswith(OWNED_PREFIXES) and k not in besides}


def gfd_oneshot(*args: str) -> dict[str, str]:
    """What our gfd, run here, labels for the same inputs: the expectation for the pod's labels."""
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "gfd"), "--oneshot", "--output-file", "-", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pairs = (line.partition("=") for line in done.stdout.splitlines() if line and not line.startswith("#"))
    return {key: value for key, _, value in pairs}


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    """``eventually``, polling every 0.5 s (each poll is API requests), failing with ``what``."""
    if not eventually(predicate, timeout, interval=0.5):
        raise AssertionError(f"not within {timeout:.0f} s: {what}")
