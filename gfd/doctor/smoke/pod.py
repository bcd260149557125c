"""The smoke test's settings and the one pod it creates, as the API's JSON.

The pod is pinned to the node by node affinity on ``metadata.name``, not by ``spec.nodeName``: nodeName
hands the pod straight to the kubelet and bypasses the scheduler, so a node whose GPUs are all taken or
whose taint the pod does not tolerate would fail later with a kubelet admission error (or, for a taint,
not at all), and the report could not show the scheduler's reason. With affinity the real scheduler
decides, as it does for every GPU workload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gfd import __version__
from gfd.doctor.cuda_table import CudaVersion

GPU_RESOURCE = "nvidia.com/gpu"
# The chart's image (charts/gpu-labeller values.yaml image.repository, tag = appVersion = this version).
DEFAULT_PROBE_IMAGE = f"ghcr.io/gpu-labeller/gpu-labeller:{__version__}"
PROBE_COMMAND = ("python3", "-m", "gfd.doctor.probe")
PROBE_CONTAINER = "probe"
WORKLOAD_CONTAINER = "workload"
APP_LABEL = "app.kubernetes.io/name"
APP = "gfd-smoke-test"  # the pod's name prefix and its app label: `kubectl get pods -l ...` finds leftovers
NONROOT = 65532  # the project image's user
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# GPU nodes are often tainted so that only GPU pods land there (GKE: nvidia.com/gpu=present:NoSchedule);
# GPU workloads carry this toleration, and so does the smoke test's pod.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
_TAINT = re.compile(
    r"^(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)(=(?P<value>[-A-Za-z0-9_.]*))?(:(?P<effect>\w+))?$"
)


@dataclass(frozen=True)
class SmokeOptions:
    node: str
    namespace: str = "default"
    runtime_class: str | None = "nvidia"  # None: no runtimeClassName, the node's default runtime
    probe_image: str = DEFAULT_PROBE_IMAGE
    image: str | None = None  # the admin's image, run after the probe
    command: tuple[str, ...] = ()  # the admin's command; empty: the image's own
    cuda: CudaVersion | None = None
    timeout_s: float = 180.0
    tolerations: tuple[dict[str, str], ...] = ()


def parse_toleration(text: str) -> dict[str, str]:
    """``KEY[=VALUE][:EFFECT]`` as `kubectl taint` writes a taint -> the toleration that lets it pass."""
    match = _TAINT.fullmatch(text.strip())
    if not match:
        raise ValueError(f"expected KEY[=VALUE][:EFFECT], got {text!r}")
    toleration = {"key": match["key"]}
    if match["value"] is not None:
        toleration |= {"operator": "Equal", "value": match["value"]}
    else:
        toleration["operator"] = "Exists"
    if match["effect"] is not None:
        if match["effect"] not in EFFECTS:
            raise ValueError(f"effect must be one of {', '.join(EFFECTS)}, got {match['effect']!r}")
        toleration["effect"] = match["effect"]
    return toleration


def tolerates(tolerations: list[dict[str, str]], taint: dict[str, str]) -> bool:
    """Kubernetes' rule: same key (or an empty key with Exists), the value when Equal, the effect when set."""
    for t in tolerations:
        if t.get("key") and t["key"] != taint.get("key"):
            continue
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def pod_tolerations(options: SmokeOptions) -> list[dict[str, str]]:
    return [GPU_TOLERATION, *options.tolerations]


def manifest(options: SmokeOptions, name: str) -> dict[str, Any]:
    """The pod: the probe alone, or the probe as init container before the admin's image. Both ask for
    one GPU; the kubelet gives an init container's devices to the containers after it, so both see the
    same GPU."""
    gpu = {"limits": {GPU_RESOURCE: "1"}}
    probe: dict[str, Any] = {
        "name": PROBE_CONTAINER,
        "image": options.probe_image,
        "imagePullPolicy": "IfNotPresent",  # as the chart pulls it
        "command": list(PROBE_COMMAND),
        "resources": gpu,
        # Pod Security "restricted", so the probe is admitted in any namespace.
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NONROOT,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        # Stops the containers if this process dies before it can delete the pod.
        "activeDeadlineSeconds": int(options.timeout_s) + 60,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [options.node]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": pod_tolerations(options),
    }
    if options.runtime_class is not None:
        spec["runtimeClassName"] = options.runtime_class
    if options.image is None:
        spec["containers"] = [probe]
    else:
        # The admin's image as their pods run it: its pull policy and security context left to Kubernetes.
        workload: dict[str, Any] = {"name": WORKLOAD_CONTAINER, "image": options.image, "resources": gpu}
        if options.command:
            workload["command"] = list(options.command)
        spec["initContainers"] = [probe]
        spec["containers"] = [workload]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": options.namespace,
            "labels": {APP_LABEL: APP, "app.kubernetes.io/part-of": "gpu-labeller"},
        },
        "spec": spec,
    }
