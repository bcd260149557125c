"""Hand-written API JSON for the smoke test's judges, shaped as the API server and kubelet write it (the
real-node tests in tests/node/test_smoke_on_node.py produce each state for real)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gfd.doctor.model import Finding
from gfd.doctor.probe import NvmlStart, ProbeGpu, ProbeResult
from gfd.doctor.smoke.model import PodRun
from gfd.doctor.smoke.pod import SmokeOptions

NODE = "gpu-node-1"
UUID = "GPU-00000003-0000-4000-8000-000000000103"
LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/cuda.driver-version.full": "550.54.15",
}


def node(
    *,
    ready: str = "True",
    labels: dict[str, str] | None = None,
    gpus: str | None = "8",
    capacity: str | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    allocatable = {"cpu": "2"} | ({"nvidia.com/gpu": gpus} if gpus is not None else {})
    return {
        "metadata": {"name": NODE, "labels": LABELS if labels is None else labels},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "ok"}],
            "allocatable": allocatable,
            "capacity": {"nvidia.com/gpu": capacity or gpus or "0"},
            "nodeInfo": {"kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://1.6.20"},
        },
    }


def container(name: str, **state: Any) -> dict[str, Any]:
    return {"name": name, "state": state}


def pod(
    phase: str = "Succeeded",
    *,
    scheduled: dict[str, str] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    inits: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    conditions = [scheduled or {"type": "PodScheduled", "status": "True"}]
    placed = conditions[0]["status"] == "True"
    return {
        "metadata": {"name": "gfd-smoke-test-abc123", "namespace": "default"},
        "spec": {"nodeName": NODE} if placed else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": statuses or [],
            **({"initContainerStatuses": inits} if inits else {}),
        },
    }


def unschedulable(message: str) -> dict[str, str]:
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}


def probe(
    *,
    ok: bool = True,
    code: int | None = None,
    advice: str | None = None,
    visible: str | None = UUID,
    nodes: tuple[str, ...] = ("/dev/nvidia-uvm", "/dev/nvidia3", "/dev/nvidiactl"),
    gpus: tuple[ProbeGpu, ...] = (ProbeGpu(0, "NVIDIA A100-SXM4-40GB", UUID, 3),),
    cuda: int = 12040,
) -> ProbeResult:
    if not ok:
        return ProbeResult(NvmlStart(False, code, advice), visible, nodes)
    return ProbeResult(NvmlStart(True), visible, nodes, "550.54.15", cuda, gpus)


def ran(result: ProbeResult | None = None, **run: Any) -> PodRun:
    """A pod whose probe ran to the end and printed ``result``."""
    result = probe() if result is None else result
    exit_code = 0 if result.nvml.ok else 1
    status = container("probe", terminated={"exitCode": exit_code, "reason": "Completed"})
    fields: dict[str, Any] = {
        "pod": pod("Succeeded" if exit_code == 0 else "Failed", statuses=[status]),
        "probe_log": result.line(),
        "probe": result,
    }
    return PodRun(**(fields | run))


OPTIONS = SmokeOptions(node=NODE)
WITH_IMAGE = replace(OPTIONS, image="registry.example/train:1")


def one(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]
