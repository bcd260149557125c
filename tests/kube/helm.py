"""The real helm (3 and 4) against the real control plane: install and uninstall the chart, and what a
cluster must hold for it (the API server's endpoints, the Prometheus Operator's ServiceMonitor kind)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.deploy.chart import CHART, REPO, Tools, documents, run_helm
from tests.kube.controlplane import ControlPlane

TOOLS = Tools(bin=REPO / ".cache" / "tools" / "bin")
RELEASE_SECRET_TYPE = "helm.sh/release.v1"


def helm(
    which: str, kube: ControlPlane, tmp: Path, *args: str, values: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS --kubeconfig ADMIN`` with HOME and helm's directories inside ``tmp``."""
    if not os.access(TOOLS.helm(which), os.X_OK):
        raise AssertionError(f"{TOOLS.helm(which)} is missing: run scripts/install-tools.sh")
    return run_helm(TOOLS, which, *args, "--kubeconfig", str(kube.admin_kubeconfig), values=values, tmp=tmp)


def install(
    which: str,
    kube: ControlPlane,
    tmp: Path,
    release: str,
    namespace: str,
    values: dict[str, Any],
    chart: Path = CHART,
) -> subprocess.CompletedProcess[str]:
    """``helm install RELEASE CHART -n NAMESPACE -o json`` (the chart's directory, or a packaged .tgz);
    the release (with its manifest) is the JSON on stdout."""
    args = ("install", release, str(chart), "-n", namespace, "-o", "json")
    return helm(which, kube, tmp, *args, values=values)


def manifest_objects(release_json: str) -> list[dict[str, Any]]:
    """The objects helm created for the release (its manifest; test hooks are not created on install)."""
    return documents(json.loads(release_json)["manifest"])


def hook_manifests(release_json: str) -> str:
    """The release's hooks (the ``helm test`` pod and its NetworkPolicy), which install does not create."""
    return "\n---\n".join(hook["manifest"] for hook in json.loads(release_json).get("hooks") or [])


def server_dry_run(kube: ControlPlane, namespace: str, manifests: str, tmp: Path) -> list[str]:
    """Create ``manifests`` with ``dryRun=All``: validated and admitted (Pod Security enforced on pods)
    exactly as a real create, but not stored. The names kubectl reports as created."""
    path = tmp / "dry-run.yaml"
    path.write_text(manifests)
    result = kube.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", str(path), "-o", "name", check=False
    )
    assert result.returncode == 0, f"the server refused {path.name}:\n{result.stderr}"
    return result.stdout.split()


def ref(obj: dict[str, Any]) -> str:
    """``kind.group/name``, how kubectl names one object of any API group."""
    group = obj["apiVersion"].rpartition("/")[0]
    kind = obj["kind"].lower()
    return f"{kind}.{group}/{obj['metadata']['name']}" if group else f"{kind}/{obj['metadata']['name']}"


def get_objects(kube: ControlPlane, namespace: str, refs: list[str]) -> dict[str, dict[str, Any]]:
    """The stored objects, by ``ref``; any that is missing fails the call (kubectl says NotFound)."""
    result = kube.kubectl("get", "-n", namespace, *refs, "-o", "json", check=False)
    assert result.returncode == 0, f"kubectl get {' '.join(refs)}:\n{result.stderr}"
    body = json.loads(result.stdout)
    items = body["items"] if body.get("kind") == "List" else [body]
    return {ref(item): item for item in items}


def of_release(kube: ControlPlane, release: str, objects: list[dict[str, Any]]) -> set[str]:
    """Every object in any namespace labelled as part of ``release``, among the kinds the release has
    plus Pods (the ``helm test`` hook) and ConfigMaps."""
    kinds = {"pods", "configmaps"} | {ref(obj).partition("/")[0] for obj in objects}
    result = kube.kubectl(
        "get", ",".join(sorted(kinds)), "-A", "-l", f"app.kubernetes.io/instance={release}", "-o", "name"
    )
    return set(result.stdout.split())


def release_secrets(kube: ControlPlane, namespace: str) -> list[str]:
    """helm's record of its releases in ``namespace`` (one Secret per revision)."""
    result = kube.kubectl(
        "get", "secrets", "-n", namespace, f"--field-selector=type={RELEASE_SECRET_TYPE}", "-o", "name"
    )
    return result.stdout.split()


def create_namespace(kube: ControlPlane, name: str, enforce: str, warn: str = "restricted") -> None:
    """A namespace as docs/deploy.md prepares it, enforcing the Pod Security level ``enforce``; the API
    server warns whenever a workload's pods would break ``warn``. With its `default` ServiceAccount, which
    a cluster's controller adds (pods that name none are admitted only when it exists)."""
    labels = {"pod-security.kubernetes.io/enforce": enforce, "pod-security.kubernetes.io/warn": warn}
    kube.must(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    kube.ensure_service_account(name, "default")


def publish_api_server_endpoints(kube: ControlPlane, address: str, port: int) -> None:
    """The `kubernetes` Service's endpoints in `default`, as a cluster's endpoint reconciler keeps them.
    The test control plane runs without one (it would publish a loopback address, which validation
    refuses), so the address here is a documentation address: what a look-up at install would find (the
    chart does none, and the tests check that nothing of it shows)."""
    endpoint_port = {"name": "https", "port": port, "protocol": "TCP"}
    kube.must(
        "POST",
        "/api/v1/namespaces/default/endpoints",
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "kubernetes"},
            "subsets": [{"addresses": [{"ip": address}], "ports": [endpoint_port]}],
        },
    )
    kube.must(
        "POST",
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [endpoint_port],
        },
    )


def install_crd(kube: ControlPlane, crd: dict[str, Any], timeout: float = 30.0) -> None:
    """Create the CustomResourceDefinition ``crd`` and wait until the API server serves its kind."""
    kube.must("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    paths = [f"/apis/{group}/{version['name']}" for version in crd["spec"]["versions"] if version["served"]]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answers = [kube.request("GET", path) for path in paths]
        if all(a.status == 200 and any(r["name"] == plural for r in a.json()["resources"]) for a in answers):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {crd['metadata']['name']} was not served within {timeout:.0f} s")


def not_kept(rendered: Any, stored: Any, path: str = "") -> list[str]:
    """Where the stored object lost or changed something the chart rendered (pruned unknown fields,
    normalised values); what the server only added (defaults, status, metadata) is not a difference, nor
    is a field rendered empty (``annotations:`` with nothing under it is null in YAML)."""
    if rendered is None:
        return []
    if isinstance(rendered, dict) and isinstance(stored, dict):
        return [
            problem
            for key, value in rendered.items()
            for problem in (
                not_kept(value, stored[key], f"{path}.{key}") if key in stored else [f"{path}.{key}: dropped"]
            )
        ]
    if isinstance(rendered, list) and isinstance(stored, list) and len(rendered) == len(stored):
        return [
            p
            for i, (r, s) in enumerate(zip(rendered, stored, strict=True))
            for p in not_kept(r, s, f"{path}[{i}]")
        ]
    return [] if rendered == stored else [f"{path}: rendered {rendered!r}, stored {stored!r}"]


def type_check_warnings(kube: ControlPlane, policy: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """What kube-controller-manager's type check found in a ValidatingAdmissionPolicy's CEL expressions
    (checked against the schemas of the kinds it matches), once it has looked at the current generation."""
    path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stored = kube.must("GET", path)
        status = stored.get("status") or {}
        if status.get("observedGeneration") == stored["metadata"]["generation"]:
            checked = status.get("typeChecking") or {}
            warnings: list[dict[str, Any]] = checked.get("expressionWarnings") or []
            return warnings
        time.sleep(0.1)
    raise AssertionError(f"policy {policy} was not type-checked within {timeout:.0f} s")
