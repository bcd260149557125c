"""Whether gfd does its job on this node: ready while the last pass labelled at least one GPU that answers.

The chart runs gfd only on nodes it selected as GPU nodes, so a gfd that finds no GPU there is broken even
though its process is fine: the NVML library is not injected (no ``nvidia`` runtime class), NVML fails
(driver not loaded, version mismatch), NVML reports no device (``NVIDIA_VISIBLE_DEVICES`` unset, a claim
with no device), the Jetson files are not mounted, or every GPU fails. Before this the pod stayed Ready and
the labels just expired. Now /readyz answers 503 with the reason in one line, ``gfd_no_gpu`` is 1 and the
log says it once (``Daemon``).

Readiness, not liveness: a restart brings no GPU back (the daemon detects the backend again every pass
anyway, so a driver or runtime fixed later is picked up without one); restarting would only trade the
one-line reason for a restart loop. Labels are unaffected: a pass that finds no GPU writes what it found
(no GPU labels, as NVIDIA's GFD), a failed pass writes nothing and the last labels expire as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from gfd.inventory import Inventory

# What hides every GPU from an NVML that loads: the runtime gave the container none, or there is none.
NO_NVML_DEVICE = (
    "no NVIDIA GPU found: NVML loaded but reports no devices (container-toolkit: the container was given "
    "none, check NVIDIA_VISIBLE_DEVICES or the DRA claim; hardware: `lspci -nn | grep 10de` on the node)"
)


@dataclass(frozen=True)
class Readiness:
    """The last pass's verdict: ``reason`` is None while ready, else the one line /readyz answers."""

    reason: str | None
    # The pass found no GPU to label (gfd_no_gpu); None: it cannot tell (it failed after the probe).
    no_gpu: bool | None

    @property
    def ready(self) -> bool:
        return self.reason is None


# Before the first pass has finished (the first one may wait on every GPU, up to half a minute after a boot).
STARTING = Readiness("no pass has finished yet", None)
READY = Readiness(None, False)


def of_inventory(inv: Inventory) -> Readiness:
    """The verdict on what a pass found: ready when at least one GPU answered."""
    if inv.devices:
        return READY
    failing = len(inv.health.failures) if inv.health is not None else 0
    if failing:
        gpus = "the GPU found fails" if failing == 1 else f"all {failing} GPUs found fail"
        return Readiness(f"no GPU answers: {gpus} (said above; gfd_gpus_failing)", True)
    if inv.backend == "nvml":
        return Readiness(NO_NVML_DEVICE, True)
    return Readiness(f"no GPU found: the {inv.backend} backend reports no devices", True)
