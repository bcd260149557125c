"""Smoke-test layers 1-4, judged from the Node and the RuntimeClass before any pod is made: a node that is
not Ready, unlabelled, without GPUs to offer or without the RuntimeClass would only leave a pod Pending."""

from __future__ import annotations

from gfd.doctor.kube import (
    DAEMONSET_FIX,
    DEVICE_PLUGIN_FIX,
    DRIVER_LABEL,
    GPU,
    MOCK_FIX,
    create_runtime_class,
    one_line,
)
from gfd.doctor.model import Finding
from gfd.doctor.smoke.model import ApiRead, Json, condition
from gfd.doctor.smoke.pod import GPU_RESOURCE
from gfd.labels import extras

CREDENTIALS = (
    "use the admin's kubeconfig (--kubeconfig): the smoke test reads nodes, runtimeclasses and the pods on "
    "the node, and creates and deletes one pod in --namespace"
)
# After the handler's name: what it is, and the way out where the node's default runtime is NVIDIA's.
RUNTIME_CLASS_OR_NONE = (
    " (the runtime's name in containerd's config), or pass --runtime-class none where nvidia is the node's "
    "default runtime"
)


def api_failure(read: ApiRead, what: str) -> Finding:
    if read.status in (401, 403):
        return Finding("FAIL", f"the API server refused to show {what} (HTTP {read.status})", CREDENTIALS)
    return Finding(
        "FAIL", f"reading {what} failed: {read.error}", "check the kubeconfig's server and the network"
    )


def node(read: ApiRead, name: str) -> list[Finding]:
    if read.found is None:
        if read.status == 404:
            return [
                Finding(
                    "FAIL",
                    f"no node named {name} in the cluster",
                    "pass --node with a name `kubectl get nodes` shows",
                )
            ]
        return [api_failure(read, f"node {name}")]
    ready = condition(read.found, "Ready")
    info = (read.found.get("status") or {}).get("nodeInfo") or {}
    versions = ", ".join(v for v in (info.get("kubeletVersion"), info.get("containerRuntimeVersion")) if v)
    if ready.get("status") != "True":
        said = one_line(f"{ready.get('reason', '')}: {ready.get('message', '')}".strip(": "))
        return [
            Finding(
                "FAIL",
                f"node {name} is not Ready (Ready={ready.get('status', 'unknown')}"
                + (f"; {said})" if said else ")"),
                f"check the kubelet and the container runtime on {name} (`journalctl -u kubelet`, "
                f"`kubectl describe node {name}`)",
            )
        ]
    if (read.found.get("spec") or {}).get("unschedulable"):
        return [
            Finding(
                "FAIL",
                f"node {name} is cordoned (spec.unschedulable): no new pods are placed on it",
                f"`kubectl uncordon {name}` when its maintenance is over",
            )
        ]
    return [Finding("PASS", f"node {name} is Ready" + (f" ({versions})" if versions else ""))]


def labels(found: Json) -> list[Finding]:
    have: dict[str, str] = dict((found.get("metadata") or {}).get("labels") or {})
    if extras.PRESENT not in have:
        return [
            Finding(
                "FAIL",
                f"none of this project's labels (no {extras.PRESENT}): nothing to compare the pod's GPU with",
                f"{DAEMONSET_FIX}, and its gfd container's log",
            )
        ]
    missing = [key for key in (GPU.product, GPU.count) if key not in have]
    if missing:
        return [
            Finding(
                "FAIL",
                f"{extras.PRESENT} is set but {', '.join(missing)} is not",
                "check the gfd container's log: it names what it could not read",
            )
        ]
    shown = ", ".join(f"{k}={have[k]}" for k in (GPU.product, GPU.count, DRIVER_LABEL) if k in have)
    if have.get(extras.SIMULATED) == "true":
        return [
            Finding(
                "WARN",
                f"simulated labels (gfd's mock backend): {shown}",
                MOCK_FIX,
            )
        ]
    return [Finding("PASS", shown)]


def device_plugin(found: Json) -> list[Finding]:
    status = found.get("status") or {}
    allocatable = _count((status.get("allocatable") or {}).get(GPU_RESOURCE))
    capacity = _count((status.get("capacity") or {}).get(GPU_RESOURCE))
    if allocatable > 0:
        return [Finding("PASS", f"allocatable {GPU_RESOURCE}={allocatable} (capacity {capacity})")]
    if capacity > 0:
        return [
            Finding(
                "FAIL",
                f"{GPU_RESOURCE} capacity {capacity} but none allocatable: the device plugin has gone (the "
                "kubelet keeps the capacity for some minutes after) or reports every GPU unhealthy",
                "check that the NVIDIA device plugin pod runs on this node (`kubectl -n kube-system get pods "
                "-o wide | grep nvidia`); in its log an Xid error names an unhealthy GPU",
            )
        ]
    return [
        Finding(
            "FAIL",
            f"the node offers no {GPU_RESOURCE} (allocatable 0): the device plugin has not registered",
            DEVICE_PLUGIN_FIX,
        )
    ]


def _count(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def runtime_class(read: ApiRead | None, name: str | None) -> list[Finding]:
    if name is None or read is None:
        return [
            Finding(
                "SKIP",
                "--runtime-class none: the pod asks for no RuntimeClass, so the node's default runtime must "
                "be the NVIDIA one",
            )
        ]
    if read.found is not None:
        return [Finding("PASS", f"RuntimeClass {name} exists (handler {read.found.get('handler')})")]
    if read.status == 404:
        return [
            Finding(
                "FAIL",
                f"no RuntimeClass {name}: the API server refuses pods that ask for it",
                create_runtime_class(name) + RUNTIME_CLASS_OR_NONE,
            )
        ]
    return [api_failure(read, f"RuntimeClass {name}")]
