"""Layer 1: is there an NVIDIA GPU at all (on the PCI bus, or a Jetson's built-in one)?"""

from __future__ import annotations

from gfd.backends.tegra import is_jetson, read_jetson_facts
from gfd.doctor.hostfs import read_hex
from gfd.doctor.model import Context, Finding, PciGpu

NVIDIA_VENDOR = 0x10DE
PCI_DIR = "sys/bus/pci/devices"


def _other_kind(pci_class: int | None) -> str:
    if pci_class is not None and pci_class >> 8 == 0x0403:
        return "audio"
    if pci_class is not None and pci_class >> 16 == 0x06:
        return "bridge (NVSwitch)"
    return "other"


def scan_pci(ctx: Context) -> tuple[list[PciGpu], list[str]]:
    """NVIDIA display-class functions, and the kinds of the other NVIDIA functions (HDMI audio, NVSwitch)."""
    gpus: list[PciGpu] = []
    others: list[str] = []
    base = ctx.path(PCI_DIR)
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        if read_hex(dev / "vendor") != NVIDIA_VENDOR:
            continue
        pci_class = read_hex(dev / "class")
        if pci_class is not None and pci_class >> 16 != 0x03:
            others.append(_other_kind(pci_class))
            continue
        gpus.append(PciGpu(dev.name, read_hex(dev / "device"), pci_class))
    return gpus, others


def check(ctx: Context) -> list[Finding]:
    gpus, others = scan_pci(ctx)
    ctx.pci_gpus = gpus
    if gpus:
        shown = ", ".join(f"{g.address} {g.kind} [10de:{g.device_id or 0:04x}]" for g in gpus[:4])
        more = f" and {len(gpus) - 4} more" if len(gpus) > 4 else ""
        kinds = ", ".join(f"{others.count(k)} {k}" for k in sorted(set(others)))
        extra = f"; other NVIDIA functions, not GPUs: {kinds}" if others else ""
        return [Finding("PASS", f"{len(gpus)} NVIDIA GPU(s) on the PCI bus: {shown}{more}{extra}")]
    facts = read_jetson_facts(ctx.host_root) if is_jetson(ctx.host_root) else None
    if facts is not None:
        ctx.jetson, ctx.jetson_facts = True, facts
        what = facts.model or "unknown board"
        soc = f" ({facts.soc})" if facts.soc else ""
        return [Finding("PASS", f"Jetson with a built-in GPU: {what}{soc}")]
    if not ctx.path(PCI_DIR).is_dir():
        return [
            Finding(
                "FAIL",
                f"cannot read {ctx.shown(PCI_DIR)} (no sysfs under {ctx.host_root})",
                "run on the node itself, or mount the host's / read-only and pass --host-root",
            )
        ]
    return [
        Finding(
            "FAIL",
            f"no NVIDIA (vendor 0x10de) GPU under {ctx.shown(PCI_DIR)} and no Jetson release file",
            "check that the GPU is seated and powered, or passed through to this VM (`lspci -nn | "
            "grep 10de`)",
        )
    ]
