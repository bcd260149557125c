"""/version, health paths and the minimal discovery documents a client may ask for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.apiserver.server import FakeApiServer

_NODE_VERBS = ["delete", "get", "list", "patch", "update", "watch"]


def _resource(name: str, kind: str, verbs: list[str], namespaced: bool = False) -> dict[str, Any]:
    return {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}


def answer(api: FakeApiServer, path: str) -> dict[str, Any] | str | None:
    major, minor = api.version.split(".")[:2]
    if path == "/version":
        return {
            "major": major,
            "minor": minor,
            "gitVersion": f"v{api.version}",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    if path in ("/healthz", "/livez", "/readyz"):
        return "ok"
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": api.address}],
        }
    if path == "/api/v1":
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                _resource("nodes", "Node", _NODE_VERBS),
                _resource("nodes/status", "Node", ["get", "patch", "update"]),
            ],
        }
    if path == "/apis":
        version = {"groupVersion": "node.k8s.io/v1", "version": "v1"}
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [{"name": "node.k8s.io", "versions": [version], "preferredVersion": version}],
        }
    if path == "/apis/node.k8s.io/v1":
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "node.k8s.io/v1",
            "resources": [_resource("runtimeclasses", "RuntimeClass", ["get", "list", "watch"])],
        }
    return None
