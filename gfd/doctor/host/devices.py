"""Layer 5: do the device files programs open to reach the GPU exist, with usable modes?"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from gfd.doctor.host.context import Context
from gfd.doctor.model import Finding

# JetPack 6 (L4T 36) uses dev/nvgpu/igpu0/*; earlier releases dev/nvhost-*-gpu. dev/nvmap is on all of them.
JETSON_GPU_NODES = ("dev/nvgpu/igpu0/ctrl", "dev/nvhost-ctrl-gpu", "dev/nvhost-gpu")
# Beside one /dev/nvidia<minor> per GPU, what CUDA programs open on a PCI GPU host (and in its containers).
CONTROL_NODES = ("dev/nvidiactl", "dev/nvidia-uvm")


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def _describe(ctx: Context, rel: str, mode: int) -> str:
    return f"{ctx.shown(rel)} {mode:04o}"


def check(ctx: Context) -> list[Finding]:
    return check_jetson(ctx) if ctx.jetson else check_pci(ctx)


def check_pci(ctx: Context) -> list[Finding]:
    want = list(CONTROL_NODES)
    numbered = sorted(
        (p.name for p in ctx.path("dev").glob("nvidia[0-9]*") if re.fullmatch(r"nvidia\d+", p.name)),
        key=lambda n: int(n[6:]),
    )
    missing = [ctx.shown(rel) for rel in want if _mode(ctx.path(rel)) is None]
    minors = [d.minor for d in ctx.nvml_devices if d.minor is not None]
    if minors:  # NVML says which file belongs to which GPU
        missing += [f"/dev/nvidia{m}" for m in sorted(minors) if f"nvidia{m}" not in numbered]
    elif len(numbered) < ctx.gpu_count:
        missing.append(f"/dev/nvidia<N> for {ctx.gpu_count - len(numbered)} of {ctx.gpu_count} GPU(s)")
    if missing:
        return [
            Finding(
                "FAIL",
                "missing: " + ", ".join(missing),
                "the device files appear when the driver is used with nvidia-modprobe: run "
                "`sudo nvidia-modprobe -u -c=0` (or `nvidia-smi` once as root); in a container, the runtime "
                "must pass them in (layer 6)",
            )
        ]
    rels = [*want, *(f"dev/{n}" for n in numbered)]
    modes = {rel: _mode(ctx.path(rel)) or 0 for rel in rels}
    shown = ", ".join(_describe(ctx, rel, m) for rel, m in modes.items())
    closed = [ctx.shown(rel) for rel, m in modes.items() if m & 0o006 != 0o006]
    if closed:
        return [
            Finding(
                "WARN",
                f"{shown}; not open to all users: {', '.join(closed)} (non-root programs get 'no CUDA "
                "device')",
                "the driver's default is 0666; check NVreg_DeviceFileMode in /etc/modprobe.d and the "
                "users' groups",
            )
        ]
    return [Finding("PASS", shown)]


def check_jetson(ctx: Context) -> list[Finding]:
    nvmap = _mode(ctx.path("dev/nvmap"))
    gpu = next((rel for rel in JETSON_GPU_NODES if _mode(ctx.path(rel)) is not None), None)
    if nvmap is None and gpu is None:
        return [
            Finding(
                "FAIL",
                "no Jetson GPU device files (/dev/nvmap, /dev/nvgpu/igpu0/*, /dev/nvhost-*-gpu)",
                "on the board, check that the L4T kernel booted (`uname -r` ends in -tegra); in a container, "
                "run with the nvidia runtime so they are passed in",
            )
        ]
    found = [ctx.shown(r) for r in ("dev/nvmap", gpu) if r is not None and _mode(ctx.path(r)) is not None]
    if nvmap is None or gpu is None:
        return [Finding("WARN", f"only {', '.join(found)} present", "the missing node stops CUDA programs")]
    return [Finding("PASS", "Jetson GPU device files present: " + ", ".join(found))]
