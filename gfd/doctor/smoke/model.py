"""The smoke test's layers and what it observed, in plain data: the judging modules (``cluster``, ``start``,
``inside``) turn these into report lines without any I/O, so each verdict is unit-tested from hand-written
API JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gfd.doctor.model import Layer
from gfd.doctor.probe import ProbeResult

Json = dict[str, Any]

NODE = Layer(1, "node", "is the node there, Ready and open to new pods?")
LABELS = Layer(2, "labels", "has gpu-labeller labelled the node's GPUs?")
DEVICE_PLUGIN = Layer(3, "device plugin", "does the node offer nvidia.com/gpu to pods?")
RUNTIME_CLASS = Layer(4, "RuntimeClass", "is there a RuntimeClass for GPU containers?")
SCHEDULING = Layer(5, "scheduling", "does the scheduler place a GPU pod on the node?")
START = Layer(6, "container start", "does the runtime start the pod's containers?")
NVML = Layer(7, "NVML in the pod", "can the pod talk to the driver?")
GPUS = Layer(8, "GPUs in the pod", "does the pod see the GPU it was given, as labelled?")
CUDA = Layer(9, "CUDA in the pod", "which CUDA versions can the pod run?")
WORKLOAD = Layer(10, "workload", "does your image run with the GPU?")
LAYERS = (NODE, LABELS, DEVICE_PLUGIN, RUNTIME_CLASS, SCHEDULING, START, NVML, GPUS, CUDA, WORKLOAD)


@dataclass(frozen=True)
class ApiRead:
    """One object read from the API: its JSON; or None with ``status`` 404 (absent) or with ``error``."""

    found: Json | None
    status: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class PodRun:
    """What became of the pod: the API's refusal, or its last status, its events and its logs."""

    refused: str | None = None  # the API server's message when it would not create the pod
    pod: Json | None = None
    events: tuple[Json, ...] = ()
    probe_log: str | None = None
    workload_log: str | None = None
    timed_out: bool = False
    # Pods on the node holding GPUs ("namespace/name", count): read when the scheduler found too few.
    gpu_holders: tuple[tuple[str, int], ...] = ()
    probe: ProbeResult | None = field(default=None)
    probe_error: str | None = None  # why the probe's log gave no result


def condition(obj: Json | None, kind: str) -> Json:
    """The status condition of type ``kind`` (Ready, PodScheduled), or {}."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), {})
