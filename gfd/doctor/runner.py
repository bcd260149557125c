"""Run the layers bottom up; once one fails, the layers above it are skipped, as a person would."""

from __future__ import annotations

from collections.abc import Callable

from gfd.doctor import cuda, devices, driver, hardware, kubernetes, nvml, toolkit
from gfd.doctor.model import Check, Context, Finding, Layer

LAYERS: tuple[Layer, ...] = (
    Layer(1, "hardware", "is there an NVIDIA GPU in this machine?", hardware.check),
    Layer(2, "kernel driver", "does the operating system drive the GPU?", driver.check),
    Layer(3, "NVML", "can programs talk to the driver (same version)?", nvml.check),
    Layer(4, "CUDA", "which CUDA versions can run here?", cuda.check),
    Layer(5, "device nodes", "can processes open the GPU (/dev files)?", devices.check),
    Layer(6, "container toolkit", "can containers get the GPU?", toolkit.check),
    Layer(
        7,
        "Kubernetes",
        "can pods be scheduled onto the GPU?",
        kubernetes.check,
        kubernetes.skip_reason,
        kubernetes.cluster_side,
    ),
)


def _check(layer: Layer, f: Finding) -> Check:
    name = f"{layer.name}: {f.item}" if f.item else layer.name
    return Check(layer.number, name, layer.purpose, f.status, f.evidence, f.fix)


def _findings(run: Callable[[Context], list[Finding]], ctx: Context) -> list[Finding]:
    try:
        return run(ctx)
    except Exception as err:  # a bug in one check must not hide the others' answers
        return [Finding("FAIL", f"the check itself failed: {type(err).__name__}: {err}")]


def run(ctx: Context, layers: tuple[Layer, ...] = LAYERS) -> list[Check]:
    checks: list[Check] = []
    failed: int | None = None
    for layer in layers:
        reason = layer.skip_reason(ctx) if layer.skip_reason else None
        if reason is not None:
            checks.append(_check(layer, Finding("SKIP", reason)))
            continue
        if failed is not None:
            if layer.cluster_side is None:
                checks.append(_check(layer, Finding("SKIP", f"fix layer {failed} first")))
                continue
            why = f"fix layer {failed} first; what reads only the cluster ran anyway (below)"
            checks.append(_check(layer, Finding("SKIP", why)))
            checks.extend(_check(layer, f) for f in _findings(layer.cluster_side, ctx))
            continue
        findings = _findings(layer.run, ctx)
        checks.extend(_check(layer, f) for f in findings)
        if any(f.status == "FAIL" for f in findings):
            failed = layer.number
    return checks


def first_failure(checks: list[Check]) -> Check | None:
    return next((c for c in checks if c.status == "FAIL"), None)
