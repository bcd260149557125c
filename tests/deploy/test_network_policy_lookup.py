"""The NetworkPolicy's API server egress comes from the cluster at install time: the real helm 3 and 4
(`helm template --dry-run=server`, whose `lookup` is the one install and upgrade use) against a read-only
HTTP endpoint that answers discovery and the `kubernetes` Service's EndpointSlices / Endpoints."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart import CHART, HELMS, NAMESPACE, RELEASE, Tools, by_kind, documents, run_helm


def _slice(name: str, service: str, family: str, addresses: list[str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": service}},
        "addressType": family,
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


# Discovery of every kind the chart renders: helm 4 maps each object to its resource before the dry run.
_SERVED: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("endpoints", "Endpoints", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("pods", "Pod", True),
    ],
    "discovery.k8s.io/v1": [("endpointslices", "EndpointSlice", True)],
    "apps/v1": [("daemonsets", "DaemonSet", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
    ],
    "admissionregistration.k8s.io/v1": [
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
    ],
}


def _resources(group_version: str) -> dict[str, Any]:
    resources = [
        {
            "name": name,
            "singularName": "",
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["get", "list", "create"],
        }
        for name, kind, namespaced in _SERVED[group_version]
    ]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _groups() -> dict[str, Any]:
    groups = []
    for group_version in _SERVED:
        if "/" in group_version:
            version = {"groupVersion": group_version, "version": group_version.split("/")[1]}
            groups.append(
                {"name": group_version.split("/")[0], "versions": [version], "preferredVersion": version}
            )
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class _Cluster:
    """What the look-up can see; None answers 404 as a server without the object does."""

    def __init__(self, slices: list[dict[str, Any]], endpoints: dict[str, Any] | None) -> None:
        self.paths: dict[str, Any] = {
            "/version": {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"},
            "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
            "/apis": _groups(),
            **{f"/api/{gv}" if gv == "v1" else f"/apis/{gv}": _resources(gv) for gv in _SERVED},
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices": {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSliceList",
                "metadata": {"resourceVersion": "1"},
                "items": slices,
            },
            "/api/v1/namespaces/default/endpoints/kubernetes": endpoints,
        }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[_Cluster, Path]]:
    state = _Cluster([], None)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = state.paths.get(self.path.split("?", 1)[0])
            code = 200 if body is not None else 404
            if body is None:
                body = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                }
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield state, kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def _api_egress(tools: Tools, which: str, kubeconfig: Path, tmp: Path, *extra: str) -> dict[str, Any]:
    proc = run_helm(
        tools,
        which,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=server",
        # Our endpoint serves no OpenAPI documents; kubernetes-validate checks the objects elsewhere.
        "--disable-openapi-validation",
        "--kubeconfig",
        str(kubeconfig),
        *extra,
        tmp=tmp,
    )
    assert proc.returncode == 0, proc.stderr
    (policy,) = [
        p for p in by_kind(documents(proc.stdout), "NetworkPolicy") if p["metadata"]["name"] == RELEASE
    ]
    kubernetes_validate.validate(policy, "1.30.0", strict=True)
    dns, api = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    return {"cidrs": [t["ipBlock"]["cidr"] for t in api["to"]], "ports": [p["port"] for p in api["ports"]]}


@pytest.mark.parametrize("which", HELMS)
def test_egress_to_the_api_servers_endpoint_slices(
    tools: Tools, tmp_path: Path, cluster: tuple[_Cluster, Path], which: str
) -> None:
    state, kubeconfig = cluster
    state.paths["/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"]["items"] = [
        _slice("web-x1", "web", "IPv4", ["10.244.1.7"], 8080),  # another Service in default: not the API
        _slice("kubernetes", "kubernetes", "IPv4", ["172.18.0.2", "172.18.0.3"], 6443),
        _slice("kubernetes-v6", "kubernetes", "IPv6", ["fd00:10::2"], 6443),
    ]
    egress = _api_egress(tools, which, kubeconfig, tmp_path)
    assert egress["cidrs"] == ["172.18.0.2/32", "172.18.0.3/32", "fd00:10::2/128"]
    assert egress["ports"] == [6443, 443]


@pytest.mark.parametrize("which", HELMS)
def test_egress_from_endpoints_where_no_slice_names_the_api(
    tools: Tools, tmp_path: Path, cluster: tuple[_Cluster, Path], which: str
) -> None:
    state, kubeconfig = cluster
    state.paths["/api/v1/namespaces/default/endpoints/kubernetes"] = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "192.168.49.2"}], "ports": [{"name": "https", "port": 8443}]}],
    }
    egress = _api_egress(
        tools, which, kubeconfig, tmp_path, "--set", "networkPolicy.apiServerCIDRs={10.0.0.0/28}"
    )
    # The values' CIDRs come on top, e.g. a control-plane subnet whose addresses may change.
    assert egress["cidrs"] == ["192.168.49.2/32", "10.0.0.0/28"]
    assert egress["ports"] == [8443, 443, 6443]


@pytest.mark.parametrize("which", HELMS)
def test_install_fails_clearly_when_the_cluster_names_no_api_server(
    tools: Tools, tmp_path: Path, cluster: tuple[_Cluster, Path], which: str
) -> None:
    _, kubeconfig = cluster
    proc = run_helm(
        tools,
        which,
        "template",
        RELEASE,
        str(CHART),
        "--dry-run=server",
        "--kubeconfig",
        str(kubeconfig),
        tmp=tmp_path,
    )
    assert proc.returncode != 0
    assert "networkPolicy: the API server's addresses are unknown" in proc.stderr
