"""The chart installed by the real helm 3 and 4 into a real kube-apiserver, for the documented defaults and
every variant of the values matrix: the server accepts every object (schema, validation, admission, Pod
Security), stores it as rendered, the admission policy's CEL type-checks against the Node schema, and
``helm uninstall`` leaves nothing of the release behind.

These tests run on a control plane of their own: the shared one holds rbac/ (the chart's objects under the
documented release name, owned by another field manager), and the admission policies and namespaces made
here should not meet the other tests.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import CHART, HELMS, MATRIX, documents
from tests.kube.controlplane import OLDEST_BINARIES, ControlPlane
from tests.kube.helm import (
    create_namespace,
    get_objects,
    helm,
    hook_manifests,
    install,
    install_service_monitor_crd,
    manifest_objects,
    not_kept,
    of_release,
    publish_api_server_endpoints,
    ref,
    release_secrets,
    server_dry_run,
    type_check_warnings,
)

# The chart's README install: no values at all (the NetworkPolicy finds the API server by looking it up).
CASES: dict[str, dict[str, Any]] = {"documented": {}, **MATRIX}
# docs/deploy.md, "Pod Security Standard per mode": the modes that need the namespace to be privileged,
# and the containers that break "restricted" in each (Jetson: only its hostPath volumes; nfd-lite: never).
PRIVILEGED = {"hostpath": {"gfd"}, "jetson": set(), "vgpu-and-mig-monitor": {"gfd"}}
POD_SECURITY_WARNING = "would violate PodSecurity"
# Where the cluster says its API server is: a port outside the chart's default apiServerPorts, so only the
# look-up can have put it into the NetworkPolicy.
API_ADDRESS, API_PORT = "192.0.2.1", 8443


def warned_containers(warnings: str) -> set[str]:
    """The containers a Pod Security warning names (`container "a"`, `containers "a", "b"`; helm's log
    escapes the quotes)."""
    names: set[str] = set()
    for listed in re.findall(r'containers? ((?:\\?"[a-z0-9-]+\\?"(?:, | and )?)+)', warnings):
        names.update(re.findall(r'"([a-z0-9-]+)\\?"', listed))
    return names


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("chart-kube")) as plane:
        publish_api_server_endpoints(plane, API_ADDRESS, API_PORT)
        install_service_monitor_crd(plane)
        yield plane


def installed(
    cluster: ControlPlane, tmp: Path, which: str, name: str, values: dict[str, Any]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Install release ``name`` into namespace ``name``; the objects helm created."""
    done = install(which, cluster, tmp, name, name, values)
    assert done.returncode == 0, f"{which} install failed:\n{done.stderr}"
    return done, manifest_objects(done.stdout)


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize("entry", list(CASES))
def test_install_is_accepted_and_uninstall_removes_everything(
    cluster: ControlPlane, tmp_path: Path, which: str, entry: str
) -> None:
    name = f"{entry}-{which}"  # release and namespace: cases never share an object
    level = "privileged" if entry in PRIVILEGED else "restricted"
    create_namespace(cluster, name, level)
    done, objects = installed(cluster, tmp_path, which, name, CASES[entry])

    refs = [ref(obj) for obj in objects]
    assert any(r.startswith("daemonset.apps/") for r in refs), refs
    stored = get_objects(cluster, name, refs)
    changed = {r: diff for obj in objects if (diff := not_kept(obj, stored[r := ref(obj)]))}
    assert not changed, f"the server did not keep what the chart rendered: {changed}"
    # Every namespace warns at "restricted": only the modes documented as privileged may set it off.
    assert (POD_SECURITY_WARNING in done.stderr) == (entry in PRIVILEGED), done.stderr
    assert warned_containers(done.stderr) == PRIVILEGED.get(entry, set()), done.stderr
    for policy in (o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"):
        assert type_check_warnings(cluster, policy) == []
    # The helm test hooks are created only by `helm test`; the server must accept them too (the pod under
    # the namespace's enforced Pod Security level).
    hooks = hook_manifests(done.stdout)
    assert len(server_dry_run(cluster, name, hooks, tmp_path)) == len(documents(hooks)) > 0

    assert of_release(cluster, name, objects) == set(refs)  # all labelled as the release's, nothing else

    gone = helm(which, cluster, tmp_path, "uninstall", name, "-n", name)
    assert gone.returncode == 0, gone.stderr
    assert of_release(cluster, name, objects) == set()
    assert release_secrets(cluster, name) == []


@pytest.mark.parametrize("which", HELMS)
def test_network_policy_lets_nfd_lite_reach_the_api_server_it_looked_up(
    cluster: ControlPlane, tmp_path: Path, which: str
) -> None:
    name = f"lookup-{which}"
    create_namespace(cluster, name, "restricted")
    extra = "10.0.0.0/24"
    _, objects = installed(cluster, tmp_path, which, name, {"networkPolicy": {"apiServerCIDRs": [extra]}})
    policy = next(obj for obj in objects if obj["kind"] == "NetworkPolicy")
    stored = get_objects(cluster, name, [ref(policy)])[ref(policy)]
    api_rules = [rule for rule in stored["spec"]["egress"] if any("ipBlock" in peer for peer in rule["to"])]
    assert len(api_rules) == 1
    cidrs = {peer["ipBlock"]["cidr"] for peer in api_rules[0]["to"]}
    ports = {port["port"] for port in api_rules[0]["ports"]}
    assert cidrs == {f"{API_ADDRESS}/32", extra}
    assert ports == {API_PORT, 443, 6443}
    assert helm(which, cluster, tmp_path, "uninstall", name, "-n", name).returncode == 0


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("chart-kube-1.30"), OLDEST_BINARIES) as plane:
        publish_api_server_endpoints(plane, API_ADDRESS, API_PORT)
        yield plane


@pytest.mark.parametrize("which", HELMS)
def test_the_documented_install_on_the_oldest_supported_kubernetes(
    oldest: ControlPlane, tmp_path: Path, which: str
) -> None:
    """Chart.yaml says kubeVersion >= 1.30: on a real 1.30 server every object is accepted and the
    admission policy type-checks against its Node schema and CEL environment."""
    name = f"oldest-{which}"
    create_namespace(oldest, name, "restricted")
    _, objects = installed(oldest, tmp_path, which, name, {})
    refs = [ref(obj) for obj in objects]
    stored = get_objects(oldest, name, refs)
    assert not {r: diff for obj in objects if (diff := not_kept(obj, stored[r := ref(obj)]))}
    for policy in (o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"):
        assert type_check_warnings(oldest, policy) == []
    assert helm(which, oldest, tmp_path, "uninstall", name, "-n", name).returncode == 0
    assert of_release(oldest, name, objects) == set()


PAUSE = {"spec": {"template": {"spec": {"nodeSelector": {"gpu-labeller.io/paused": "true"}}}}}
RESUME = [{"op": "remove", "path": "/spec/template/spec/nodeSelector/gpu-labeller.io~1paused"}]


@pytest.mark.parametrize("which", HELMS)
def test_the_documented_policy_change_with_the_writers_paused(
    oldest: ControlPlane, tmp_path: Path, which: str
) -> None:
    """docs/deploy.md, "Changing the admission policy before Kubernetes 1.37": the pause (a nodeSelector no
    node carries, set with kubectl) survives the helm upgrade that changes the policy, and the resume takes
    it away again, on a real 1.30 server with the real helm and kubectl."""
    name = f"pause-{which}"
    create_namespace(oldest, name, "restricted")
    _, objects = installed(oldest, tmp_path, which, name, {})
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")

    def stored(obj: dict[str, Any]) -> dict[str, Any]:
        return get_objects(oldest, name, [ref(obj)])[ref(obj)]

    def node_selector() -> dict[str, str]:
        return dict(stored(daemonset)["spec"]["template"]["spec"].get("nodeSelector") or {})

    ds = daemonset["metadata"]["name"]
    oldest.kubectl("-n", name, "patch", "daemonset", ds, "--type=merge", "-p", json.dumps(PAUSE))
    assert node_selector() == {"gpu-labeller.io/paused": "true"}
    upgraded = helm(
        which, oldest, tmp_path, "upgrade", name, str(CHART), "-n", name, "--reuse-values",
        values={"nfdLite": {"allowPrefixes": ["nvidia.com/"]}},
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    prefixes = next(v for v in stored(policy)["spec"]["variables"] if v["name"] == "allowedPrefixes")
    assert prefixes["expression"] == "['nvidia.com/']"
    assert node_selector() == {"gpu-labeller.io/paused": "true"}, "the upgrade resumed the writers"
    oldest.kubectl("-n", name, "patch", "daemonset", ds, "--type=json", "-p", json.dumps(RESUME))
    assert node_selector() == {}
    assert helm(which, oldest, tmp_path, "uninstall", name, "-n", name).returncode == 0
