"""Layer 1: is there an NVIDIA GPU at all (on the PCI bus, or a Jetson's built-in one)?"""

from __future__ import annotations

from gfd.backends import decoding
from gfd.backends.errors import BackendError
from gfd.backends.host import NO_GPU_FIX, NO_GPU_ON_THE_BUS, PCI_DIR, scan_pci
from gfd.backends.tegra import TegraBackend
from gfd.doctor.host.context import Context
from gfd.doctor.model import Finding
from gfd.inventory import Inventory


def _other_kind(pci_class: int | None) -> str:
    if pci_class is not None and pci_class >> 8 == decoding.PCI_AUDIO:
        return "audio"
    if pci_class is not None and pci_class >> 16 == decoding.PCI_BASE_BRIDGE:
        return "bridge (NVSwitch)"
    return "other"


def check(ctx: Context) -> list[Finding]:
    gpus, other_classes = scan_pci(ctx.host_root)
    others = [_other_kind(c) for c in other_classes]
    ctx.pci_gpus = gpus
    if gpus:
        shown = ", ".join(f"{g.address} {g.kind} [10de:{g.device_id or 0:04x}]" for g in gpus[:4])
        more = f" and {len(gpus) - 4} more" if len(gpus) > 4 else ""
        kinds = ", ".join(f"{others.count(k)} {k}" for k in sorted(set(others)))
        extra = f"; other NVIDIA functions, not GPUs: {kinds}" if others else ""
        return [Finding("PASS", f"{len(gpus)} NVIDIA GPU(s) on the PCI bus: {shown}{more}{extra}")]
    # One read of the Jetson's files, by the tegra backend; the layers above use what it found.
    try:
        tegra: Inventory | None = TegraBackend(ctx.host_root).probe()
    except BackendError:  # no Jetson
        tegra = None
    if tegra is not None and tegra.jetson is not None:
        jetson = tegra.jetson
        ctx.tegra = tegra
        what = jetson.model or "unknown board"
        soc = f" ({jetson.soc})" if jetson.soc else ""
        return [Finding("PASS", f"Jetson with a built-in GPU: {what}{soc}")]
    if not ctx.path(PCI_DIR).is_dir():
        return [
            Finding(
                "FAIL",
                f"cannot read {ctx.shown(PCI_DIR)} (no sysfs under {ctx.host_root})",
                "run on the node itself, or mount the host's / read-only and pass --host-root",
            )
        ]
    return [Finding("FAIL", NO_GPU_ON_THE_BUS, NO_GPU_FIX)]
