"""The chart installed the ways clusters are really run, on the real node, in one node session:

1. the GitOps way: `helm template` with no cluster, then `kubectl apply --server-side` as Argo CD applies;
2. the API server lost under the running writer as a stale NetworkPolicy loses it: iptables rules in the
   node's network namespace drop every packet between the pod and the API server's endpoint (this node's
   network plugin enforces no NetworkPolicy, so the rules stand for one whose egress no longer matches an
   address that moved). /readyz fails within the bound, the kubelet marks the pod unready, the log says
   why once; when the rules go, it recovers on its own and repairs a label again;
3. the previous release's packaged chart installed with `helm install`, then `helm upgrade --reuse-values`
   (what the previous docs said) to this chart as the release workflow packages it: the image tag follows
   appVersion, the pod is replaced, and no label disappears at any moment (every state of the Node's labels
   recorded by a watch); the documented removal ends the session.

Releases use the chart's defaults except the image (built locally, no registry) and the mock backend."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nfd_lite.settings import WriterSettings
from tests.deploy.chart import CHART, documents, run_helm
from tests.deploy.release import package_chart, previous_chart
from tests.kube.helm import TOOLS, helm
from tests.node.cluster import API_PORT, NodeCluster
from tests.node.history import LabelHistory
from tests.node.images import PROJECT_IMAGE
from tests.node.release import (
    HELM,
    HELM_TIMEOUT,
    MOCK_PROFILE,
    MOCK_VALUES,
    NAMESPACE,
    NFD_PCI_LABEL,
    ensure_namespace,
    gfd_oneshot,
    owned,
    pod_ready,
    pod_report,
    prepare_gpu_node,
    release_pods,
    the_pod,
    uninstall_pruning,
    wait_until,
)
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(1200)

RELEASE = "gpu-labeller"
THIS_VERSION = "0.2.0-rc.1"  # what the release workflow's package step makes of tag v0.2.0-rc.1
BOUND = WriterSettings.api_unreachable_after
UNREACHABLE = "cannot reach the API server"
# The mock backend, the locally built image: the tag is left to the chart (its appVersion).
REPOSITORY = PROJECT_IMAGE.split(":")[0]
RELEASE_VALUES: dict[str, Any] = {**MOCK_VALUES, "image": {"repository": REPOSITORY}}
CHART_APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]


@dataclass
class Session:
    cluster: NodeCluster
    tmp: Path
    rendered: Path | None = None


@pytest.fixture(scope="module")
def session(node_with_image: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    cluster = node_with_image
    prepare_gpu_node(cluster)
    # Each release pulls its own appVersion's image (the chart leaves the tag to it): the same local
    # build under the tag of the chart here and of the one packaged for the release.
    for tag in (CHART_APP_VERSION, THIS_VERSION):
        tagged = cluster.ctr("images", "tag", "--force", PROJECT_IMAGE, f"{REPOSITORY}:{tag}")
        assert tagged.returncode == 0, tagged.stderr
    state = Session(cluster, tmp_path_factory.mktemp("release-on-node"))
    yield state
    if state.rendered is not None:
        cluster.kubectl("delete", "--ignore-not-found", "-f", str(state.rendered), check=False)
    uninstall_pruning(cluster, state.tmp, RELEASE)


def expected_labels() -> dict[str, str]:
    return gfd_oneshot(
        "--backend", "mock", f"--mock-profile={MOCK_PROFILE}", "--mig-strategy=none",
        "--machine-type-file=/sys/class/dmi/id/product_name",
    )  # fmt: skip


def written(cluster: NodeCluster) -> dict[str, str]:
    labels = owned(cluster.labels(cluster.node), besides={NFD_PCI_LABEL})
    labels.pop("nvidia.com/gfd.timestamp", None)
    return labels


def pod_ip_get(cluster: NodeCluster, pod_ip: str, path: str) -> tuple[int, str]:
    """GET http://POD:9401/PATH from the node, as the kubelet probes it: status and body."""
    script = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        f"    r = urllib.request.urlopen('http://{pod_ip}:9401{path}', timeout=5); print(r.status); "
        "print(r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code); print(e.read().decode())\n"
    )
    done = cluster.namespaces.run("python3", "-c", script)
    status, _, body = done.stdout.partition("\n")
    return int(status), body


def metric(cluster: NodeCluster, pod_ip: str, name: str) -> float:
    _, body = pod_ip_get(cluster, pod_ip, "/metrics")
    (value,) = [line.split()[1] for line in body.splitlines() if line.startswith(f"{name} ")]
    return float(value)


def cut_off_rules(pod_ip: str) -> list[list[str]]:
    """Drop every packet between the pod and the API server's endpoint, both ways: the address the
    `kubernetes` Service translates to is, for this pod, gone."""
    return [
        ["INPUT", "-s", pod_ip, "-p", "tcp", "--dport", str(API_PORT), "-j", "DROP"],
        ["OUTPUT", "-d", pod_ip, "-p", "tcp", "--sport", str(API_PORT), "-j", "DROP"],
    ]


def diagnosis(cluster: NodeCluster, pod: dict[str, Any]) -> str:
    """For a failure message: the rules with their packet counts, the writer's API metrics, its log."""
    rules = cluster.namespaces.run("iptables", "-L", "-v", "-n", "-x", check=False).stdout
    _, metrics = pod_ip_get(cluster, pod["status"]["podIP"], "/metrics")
    api = [line for line in metrics.splitlines() if line.startswith("nfd_lite_api")]
    return "\n".join([rules, *api, *writer_log(cluster, pod)[-25:]])


def writer_log(cluster: NodeCluster, pod: dict[str, Any]) -> list[str]:
    name = pod["metadata"]["name"]
    return cluster.kubectl("logs", "-n", NAMESPACE, name, "-c", "nfd-lite").stdout.splitlines()


def test_the_gitops_render_runs_on_the_node(session: Session) -> None:
    cluster, tmp = session.cluster, session.tmp
    ensure_namespace(cluster, NAMESPACE)
    # Rendered with no cluster at all, as Argo CD renders; its `helm test` hooks are not applied.
    proc = run_helm(
        TOOLS, HELM, "template", RELEASE, str(CHART), "-n", NAMESPACE, values=RELEASE_VALUES, tmp=tmp
    )
    assert proc.returncode == 0, proc.stderr
    objects = [
        d for d in documents(proc.stdout) if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})
    ]
    session.rendered = tmp / "rendered.yaml"
    session.rendered.write_text(yaml.safe_dump_all(objects))
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=argocd-controller", "-f", str(session.rendered)
    )
    pod = the_pod(cluster, RELEASE)
    assert {c["image"] for c in pod["spec"]["containers"]} == {f"{REPOSITORY}:{CHART_APP_VERSION}"}
    expected = expected_labels()
    wait_until(lambda: written(cluster) == expected, 90, f"node labels {written(cluster)} == {expected}")


def test_a_writer_cut_off_from_the_api_server_says_so_once_and_recovers(session: Session) -> None:
    cluster = session.cluster
    pod = the_pod(cluster, RELEASE)
    pod_ip = pod["status"]["podIP"]
    assert pod_ip_get(cluster, pod_ip, "/readyz")[0] == 200
    # The writer in the pod is this checkout's, with the bound this test expects.
    settings = (
        "from nfd_lite.settings import WriterSettings as S; print(S.api_unreachable_after, S.watch_silence)"
    )
    run = [
        "exec",
        "-n",
        NAMESPACE,
        pod["metadata"]["name"],
        "-c",
        "nfd-lite",
        "--",
        "python3",
        "-c",
        settings,
    ]
    assert cluster.kubectl(*run).stdout.split() == [str(BOUND), str(WriterSettings.watch_silence)]
    keys = set(written(cluster))
    rules = cut_off_rules(pod_ip)
    with LabelHistory(cluster, cluster.node) as history:
        for rule in rules:
            cluster.namespaces.run("iptables", "-I", *rule[:1], "1", *rule[1:])
        cut_at = time.monotonic()
        try:
            if not eventually(lambda: pod_ip_get(cluster, pod_ip, "/readyz")[0] == 503, BOUND + 30, 0.5):
                raise AssertionError(f"/readyz did not fail:\n{diagnosis(cluster, pod)}")
            failed_after = time.monotonic() - cut_at
            assert metric(cluster, pod_ip, "nfd_lite_api_unreachable") == 1
            assert metric(cluster, pod_ip, "nfd_lite_api_unreachable_seconds") >= BOUND
            # What kubectl shows: the kubelet's readiness probe takes the pod out of Ready.
            wait_until(lambda: not pod_ready(release_pods(cluster, RELEASE)[0]), 60, "pod not Ready")
            unready_after = time.monotonic() - cut_at
            said = [line for line in writer_log(cluster, pod) if UNREACHABLE in line]
            assert len(said) == 1, said
            assert "networkPolicy.apiServerEgress" in said[0]
        finally:
            for rule in rules:
                cluster.namespaces.run("iptables", "-D", *rule)
            restored_at = time.monotonic()
        wait_until(lambda: pod_ip_get(cluster, pod_ip, "/readyz")[0] == 200, 90, "/readyz recovers")
        ready_after = time.monotonic() - restored_at
        wait_until(lambda: pod_ready(release_pods(cluster, RELEASE)[0]), 60, "pod Ready again")
    print(
        f"cut: /readyz failed after {failed_after:.0f} s, the pod unready after {unready_after:.0f} s; "
        f"restored: /readyz 200 after {ready_after:.0f} s, the pod Ready after "
        f"{time.monotonic() - restored_at:.0f} s"
    )
    # Within the bound of the API server's last answer, which came before the cut.
    assert failed_after <= BOUND + 2, f"/readyz failed {failed_after:.0f} s after the cut"
    log = writer_log(cluster, pod)
    assert len([line for line in log if UNREACHABLE in line]) == 1  # once for the whole outage
    assert any("the API server answers again" in line for line in log)
    assert the_pod(cluster, RELEASE)["metadata"]["uid"] == pod["metadata"]["uid"]  # no restart needed
    assert history.missing(keys) == []
    # It writes again: an owned label an admin removed is put back.
    cluster.kubectl("label", "node", cluster.node, "nvidia.com/gpu.count-")
    wait_until(lambda: set(written(cluster)) == keys, 60, "nvidia.com/gpu.count repaired")


def test_upgrade_from_the_previous_release_keeps_every_label(session: Session) -> None:
    cluster, tmp = session.cluster, session.tmp
    assert session.rendered is not None
    cluster.kubectl("delete", "--wait=true", "--timeout=90s", "-f", str(session.rendered))
    session.rendered = None
    wait_until(lambda: not release_pods(cluster, RELEASE), 90, "the GitOps release's pods gone")
    previous = previous_chart(TOOLS, tmp / "previous")
    this = package_chart(TOOLS, THIS_VERSION, tmp / "this")
    keys = set(expected_labels())
    with LabelHistory(cluster, cluster.node) as history:
        done = helm(
            HELM, cluster, tmp, "install", RELEASE, str(previous), "-n", NAMESPACE,
            "--wait", "--timeout", HELM_TIMEOUT, values=RELEASE_VALUES,
        )  # fmt: skip
        assert done.returncode == 0, f"{done.stderr}\n{pod_report(cluster, RELEASE)}"
        before = the_pod(cluster, RELEASE)
        wait_until(lambda: set(written(cluster)) == keys, 60, "labels under the previous release")
        done = helm(
            HELM, cluster, tmp, "upgrade", RELEASE, str(this), "-n", NAMESPACE, "--reuse-values",
            "--wait", "--timeout", HELM_TIMEOUT,
        )  # fmt: skip
        assert done.returncode == 0, f"{done.stderr}\n{pod_report(cluster, RELEASE)}"
        cluster.kubectl("rollout", "status", f"daemonset/{RELEASE}", "-n", NAMESPACE, "--timeout=90s")
        after = the_pod(cluster, RELEASE)
        wait_until(lambda: set(written(cluster)) == keys, 60, "labels under this release")
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "the upgrade did not replace the pod"
    assert {c["image"] for c in after["spec"]["containers"]} == {f"{REPOSITORY}:{THIS_VERSION}"}
    assert history.missing(keys) == [], "labels disappeared during the upgrade"
    assert len(history.states) >= 2  # the watch saw the writers at work, not one still picture
    (listed,) = json.loads(helm(HELM, cluster, tmp, "list", "-n", NAMESPACE, "-o", "json").stdout)
    assert (listed["chart"], listed["app_version"]) == (f"gpu-labeller-{THIS_VERSION}", THIS_VERSION)
