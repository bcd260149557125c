"""The chart installed by the real helm 3 and 4 into a real kube-apiserver, for the documented defaults and
every variant of the values matrix: the server accepts every object (schema, validation, admission, Pod
Security; Cilium's and Calico's policies against the CRDs those projects publish), stores it as rendered,
the admission policy's CEL type-checks against the Node schema, and ``helm uninstall`` leaves nothing of
the release behind. Rendered the GitOps way (`helm template` with no cluster, then `kubectl apply
--server-side`, as Argo CD applies), the objects are those `helm install` creates; and `helm upgrade` from
the previous release's packaged chart to this one's (packaged by the release workflow's own step) takes.

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
import yaml

from tests.deploy.chart import CHART, HELMS, MATRIX, documents, run_helm
from tests.deploy.cni_policies import CALICO, CILIUM, PROMETHEUS_RULE, SERVICE_MONITOR, serving_crd
from tests.deploy.release import package_chart, previous_chart
from tests.kube.controlplane import OLDEST_BINARIES, ControlPlane
from tests.kube.helm import (
    TOOLS,
    create_namespace,
    get_objects,
    helm,
    hook_manifests,
    install,
    install_crd,
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
# Where the cluster says its API server is: an address and a port no values name, so that anything looked
# up at install would show in what is installed.
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
        # The kinds the clusters those modes are for serve, as their projects publish them: Cilium's and
        # Calico's policies, the Prometheus Operator's ServiceMonitor and PrometheusRule.
        for kind in (CILIUM, CALICO, SERVICE_MONITOR, PROMETHEUS_RULE):
            install_crd(plane, serving_crd(kind))
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


EGRESS_NOTE = {
    "documented": "connect to any address on ports 443, 6443",
    "cilium": "as Cilium's kube-apiserver entity (CiliumNetworkPolicy gitops-cilium-",
    "calico": "reach the `kubernetes` Service's endpoints (Calico NetworkPolicy gitops-calico-",
}


def gitops_render(which: str, tmp: Path, release: str, values: dict[str, Any], *extra: str) -> str:
    """`helm template` as Argo CD and reviews run it: no cluster at all (no kubeconfig reachable)."""
    proc = run_helm(
        TOOLS, which, "template", release, str(CHART), "-n", release, *extra, values=values, tmp=tmp
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def not_hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Argo CD applies of a render: Helm's hooks aside (it has no counterpart for `helm test` hooks and
    creates none), as `helm install` creates them only on `helm test`."""
    return [d for d in docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]


def by_ref(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {ref(d): d for d in docs}


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize("entry", ["documented", "cilium", "calico"])
def test_the_gitops_render_is_what_helm_install_creates_and_applies_server_side(
    cluster: ControlPlane, tmp_path: Path, which: str, entry: str
) -> None:
    name = f"gitops-{entry}-{which}"
    create_namespace(cluster, name, "restricted")
    values = CASES[entry]
    offline = documents(gitops_render(which, tmp_path, name, values))
    # The documented way for plain kubectl drops the same hooks.
    assert documents(gitops_render(which, tmp_path, name, values, "--skip-tests")) == not_hooks(offline)
    # helm install, which could look things up in this cluster (the API server's endpoints are
    # published), creates exactly those objects.
    done, installed_objects = installed(cluster, tmp_path, which, name, values)
    assert by_ref(installed_objects) == by_ref(not_hooks(offline))
    # The notes say where nfd-lite may connect to, and that the render is the install.
    notes = " ".join(json.loads(done.stdout)["info"]["notes"].split())
    assert EGRESS_NOTE[entry] in notes, notes
    assert "`helm template` renders the same objects as this install" in notes
    assert helm(which, cluster, tmp_path, "uninstall", name, "-n", name).returncode == 0

    # Argo CD's way: the rendered objects applied server-side, under its field manager.
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(yaml.safe_dump_all(not_hooks(offline)))
    applied = ["apply", "--server-side", "--field-manager=argocd-controller", "-f", str(manifests)]
    cluster.kubectl(*applied)
    refs = [ref(d) for d in not_hooks(offline)]
    stored = get_objects(cluster, name, refs)
    assert not {r: diff for obj in not_hooks(offline) if (diff := not_kept(obj, stored[r := ref(obj)]))}
    for policy in (o["metadata"]["name"] for o in offline if o["kind"] == "ValidatingAdmissionPolicy"):
        assert type_check_warnings(cluster, policy) == []
    # In sync: a server-side diff of the same render finds nothing to change (nothing random or
    # cluster-dependent in it, nothing the server rewrites).
    diff = cluster.kubectl(
        "diff", "--server-side", "--field-manager=argocd-controller", "-f", str(manifests), check=False
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr
    cluster.kubectl("delete", "--wait=false", "-f", str(manifests))


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The previous release's chart and this one, each as `helm package` made it (this one by the release
    workflow's package step, as tag v0.2.0-rc.1 would)."""
    tmp = tmp_path_factory.mktemp("charts")
    return {
        "previous": previous_chart(TOOLS, tmp / "previous"),
        "this": package_chart(TOOLS, "0.2.0-rc.1", tmp),
    }


# Values a user of the previous release installed with: their own registry and the API server's address
# they had to give for `helm template` (now the whole of the egress rule).
PREVIOUS_VALUES = {
    "image": {"repository": "registry.example.com/gpu-labeller"},
    "networkPolicy": {"apiServerCIDRs": ["10.0.0.0/24"]},
}


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize("reuse", ["--reuse-values", "--reset-then-reuse-values"])
def test_upgrade_from_the_previous_release_keeps_the_users_values(
    cluster: ControlPlane, tmp_path: Path, charts: dict[str, Path], which: str, reuse: str
) -> None:
    name = f"upgrade-{reuse.strip('-').split('-')[0]}-{which}"
    create_namespace(cluster, name, "restricted")
    done = install(which, cluster, tmp_path, name, name, PREVIOUS_VALUES, chart=charts["previous"])
    assert done.returncode == 0, done.stderr
    before = {ref(o): o for o in manifest_objects(done.stdout)}
    # As the previous docs said: upgrade with the values kept. --reuse-values carries the previous chart's
    # defaults along (without networkPolicy.apiServerEgress, which the templates then default).
    up = helm(which, cluster, tmp_path, "upgrade", name, str(charts["this"]), "-n", name, reuse, "-o", "json")
    assert up.returncode == 0, up.stderr
    after = manifest_objects(up.stdout)
    assert set(before) <= {ref(o) for o in after}  # nothing the previous release made is deleted
    stored = get_objects(cluster, name, [ref(o) for o in after])
    assert not {r: diff for obj in after if (diff := not_kept(obj, stored[r := ref(obj)]))}
    (daemonset,) = [o for o in after if o["kind"] == "DaemonSet"]
    images = {c["image"] for c in daemonset["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.com/gpu-labeller:0.2.0-rc.1"}  # the user's registry, the new tag
    (policy,) = [o for o in after if o["kind"] == "NetworkPolicy"]
    (api,) = policy["spec"]["egress"][1:]
    assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]  # the given subnet, nothing looked up
    assert f"{API_ADDRESS}/32" in json.dumps(before)  # which the previous chart had added
    assert helm(which, cluster, tmp_path, "uninstall", name, "-n", name).returncode == 0
    assert of_release(cluster, name, after) == set()


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
