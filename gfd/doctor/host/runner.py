"""The host's layers, bottom up over one ``Context``: each check leaves in it what it found for the layers
above, and a bug in one check is reported as that layer's failure instead of hiding the others' answers."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from gfd.doctor.engine import Judge, bottom_up
from gfd.doctor.host import cuda, devices, driver, hardware, kubernetes, nvml, toolkit
from gfd.doctor.host.context import Context
from gfd.doctor.model import Check, Finding, Layer

HostCheck = Callable[[Context], list[Finding]]

HARDWARE = Layer(1, "hardware", "is there an NVIDIA GPU in this machine?")
DRIVER = Layer(2, "kernel driver", "does the operating system drive the GPU?")
NVML = Layer(3, "NVML", "can programs talk to the driver (same version)?")
CUDA = Layer(4, "CUDA", "which CUDA versions can run here?")
DEVICES = Layer(5, "device nodes", "can processes open the GPU (/dev files)?")
TOOLKIT = Layer(6, "container toolkit", "can containers get the GPU?")
KUBERNETES = Layer(7, "Kubernetes", "can pods be scheduled onto the GPU?")
# Layer 7 is judged apart (below): it applies only with a cluster to ask, and part of it reads only that.
BELOW_KUBERNETES: tuple[tuple[Layer, HostCheck], ...] = (
    (HARDWARE, hardware.check),
    (DRIVER, driver.check),
    (NVML, nvml.check),
    (CUDA, cuda.check),
    (DEVICES, devices.check),
    (TOOLKIT, toolkit.check),
)


def run(ctx: Context) -> list[Check]:
    judges: list[tuple[Layer, Judge]] = [(layer, partial(_findings, c, ctx)) for layer, c in BELOW_KUBERNETES]
    judges.append((KUBERNETES, partial(_kubernetes, ctx)))
    return bottom_up(judges, blocked={KUBERNETES: partial(_kubernetes_blocked, ctx)})


def _findings(check: HostCheck, ctx: Context) -> list[Finding]:
    try:
        return check(ctx)
    except Exception as err:  # a bug in one check must not hide the others' answers
        return [Finding("FAIL", f"the check itself failed: {type(err).__name__}: {err}")]


def _kubernetes(ctx: Context) -> list[Finding]:
    reason = kubernetes.skip_reason(ctx)
    return [Finding("SKIP", reason)] if reason is not None else _findings(kubernetes.check, ctx)


def _kubernetes_blocked(ctx: Context, failed: int) -> list[Finding]:
    """Layer 7 above a failed layer: its checks that read only the cluster, not this machine, still run
    (from a workstation the layers below describe the workstation, not the node)."""
    reason = kubernetes.skip_reason(ctx)
    if reason is not None:
        return [Finding("SKIP", reason)]
    why = f"fix layer {failed} first; what reads only the cluster ran anyway (below)"
    return [Finding("SKIP", why), *_findings(kubernetes.cluster_side, ctx)]
