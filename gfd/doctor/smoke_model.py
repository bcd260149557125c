"""The smoke test's layers and what it observed, in plain data: the judging modules (smoke_cluster,
smoke_start, smoke_inside) turn these into report lines without any I/O, so each verdict is unit-tested
from hand-written API JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gfd.doctor.model import Check, Finding
from gfd.doctor.probe import ProbeResult

Json = dict[str, Any]


@dataclass(frozen=True)
class SmokeLayer:
    number: int
    name: str
    purpose: str


NODE = SmokeLayer(1, "node", "is the node there, Ready and open to new pods?")
LABELS = SmokeLayer(2, "labels", "has gpu-labeller labelled the node's GPUs?")
DEVICE_PLUGIN = SmokeLayer(3, "device plugin", "does the node offer nvidia.com/gpu to pods?")
RUNTIME_CLASS = SmokeLayer(4, "RuntimeClass", "is there a RuntimeClass for GPU containers?")
SCHEDULING = SmokeLayer(5, "scheduling", "does the scheduler place a GPU pod on the node?")
START = SmokeLayer(6, "container start", "does the runtime start the pod's containers?")
NVML = SmokeLayer(7, "NVML in the pod", "can the pod talk to the driver?")
GPUS = SmokeLayer(8, "GPUs in the pod", "does the pod see the GPU it was given, as labelled?")
CUDA = SmokeLayer(9, "CUDA in the pod", "which CUDA versions can the pod run?")
WORKLOAD = SmokeLayer(10, "workload", "does your image run with the GPU?")
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


Judge = Callable[[], list[Finding]]


def bottom_up(layers: Sequence[tuple[SmokeLayer, Judge]], failed_below: int | None = None) -> list[Check]:
    """Judge each layer in order; once one fails, the ones above are skipped, as the host doctor does."""
    checks: list[Check] = []
    failed = failed_below
    for layer, judge in layers:
        findings = [Finding("SKIP", f"fix layer {failed} first")] if failed is not None else judge()
        for f in findings:
            name = f"{layer.name}: {f.item}" if f.item else layer.name
            checks.append(Check(layer.number, name, layer.purpose, f.status, f.evidence, f.fix))
        if failed is None and any(f.status == "FAIL" for f in findings):
            failed = layer.number
    return checks


def condition(obj: Json | None, kind: str) -> Json:
    """The status condition of type ``kind`` (Ready, PodScheduled), or {}."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), {})


def one_line(text: object, limit: int = 300) -> str:
    """A message from the API or a log as one printable line (no control characters), cut to ``limit``."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
