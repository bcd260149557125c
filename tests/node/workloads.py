"""Pods the node tests run, and waiting for what the kubelet and scheduler do with them."""

from __future__ import annotations

import json
from typing import Any

from tests.kube.controlplane import ControlPlane
from tests.waiting import eventually


def pod(name: str, image: str, command: list[str], namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """A one-container Pod that runs ``command`` once; ``spec`` adds to the pod spec, ``resources`` and
    ``env`` go to the container."""
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": command,
    }
    for key in ("resources", "env"):
        if key in spec:
            container[key] = spec.pop(key)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            **spec,
        },
    }


def apply(kube: ControlPlane, *objects: dict[str, Any]) -> None:
    kube.kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    )


def get_pod(kube: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kube.must("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return found


def wait_phase(
    kube: ControlPlane, namespace: str, name: str, phase: str, timeout: float = 90.0
) -> dict[str, Any]:
    """The pod once it reached ``phase``; fails with its status and events if it did not."""

    def reached() -> bool:
        answer = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return answer.status == 200 and answer.json()["status"].get("phase") == phase

    if not eventually(reached, timeout, interval=0.3):
        raise AssertionError(
            f"pod {namespace}/{name} not {phase} in {timeout:.0f} s: {describe(kube, namespace, name)}"
        )
    return get_pod(kube, namespace, name)


def describe(kube: ControlPlane, namespace: str, name: str) -> str:
    """The pod's status and its events, for a failure message."""
    answer = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    status = answer.json().get("status") if answer.status == 200 else answer.message
    events = kube.must(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}"
    )
    said = [f"{e.get('reason')}: {e.get('message')}" for e in events.get("items", [])]
    return json.dumps({"status": status, "events": said}, indent=1)[-4000:]


def delete(kube: ControlPlane, namespace: str, name: str, kind: str = "pod") -> None:
    kube.kubectl("delete", kind, "-n", namespace, name, "--ignore-not-found", "--wait=false")
