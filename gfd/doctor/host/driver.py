"""Layer 2: is the NVIDIA kernel driver loaded, and which version is it?"""

from __future__ import annotations

from gfd.backends import decoding
from gfd.backends.host import KERNEL_MODULE_VERSION, kernel_module_version, read_text
from gfd.backends.tegra import TEGRA_RELEASE
from gfd.doctor.host.context import Context
from gfd.doctor.model import Finding


def loaded_modules(ctx: Context) -> set[str]:
    names = (
        {p.name for p in ctx.path("sys/module").glob("nvidia*")} if ctx.path("sys/module").is_dir() else set()
    )
    if ctx.path("sys/module/nouveau").is_dir():
        names.add("nouveau")
    for line in (read_text(ctx.path("proc/modules")) or "").splitlines():
        name = line.split(" ", 1)[0]
        if name.startswith("nvidia") or name == "nouveau":
            names.add(name)
    return names


def check(ctx: Context) -> list[Finding]:
    return check_jetson(ctx) if ctx.jetson else check_pci(ctx)


def check_pci(ctx: Context) -> list[Finding]:
    modules = loaded_modules(ctx)
    version = kernel_module_version(ctx.host_root)
    open_module = decoding.is_open_kernel_module(read_text(ctx.path(KERNEL_MODULE_VERSION)) or "")
    if version is None and "nvidia" not in modules:
        if "nouveau" in modules:
            return [
                Finding(
                    "FAIL",
                    "the open-source nouveau driver holds the GPU; the NVIDIA kernel module is not loaded",
                    "blacklist nouveau (`/etc/modprobe.d/blacklist-nouveau.conf`), rebuild the "
                    "initramfs, reboot",
                )
            ]
        return [
            Finding(
                "FAIL",
                f"NVIDIA kernel module not loaded: no {ctx.shown(KERNEL_MODULE_VERSION)}",
                "install the NVIDIA driver (or the GPU Operator driver container), then `sudo "
                "modprobe nvidia`; "
                "if that fails, `sudo dmesg | grep -i nvrm` (Secure Boot refuses unsigned modules)",
            )
        ]
    flavour = " (open kernel module)" if open_module else ""
    shown = version or "unknown version"
    ctx.kernel_version = version
    findings = [Finding("PASS", f"nvidia kernel module {shown}{flavour} loaded")]
    if modules and "nvidia_uvm" not in modules:
        findings.append(
            Finding(
                "WARN",
                "nvidia_uvm module not loaded: CUDA programs will fail to start",
                "`sudo modprobe nvidia-uvm` (or `sudo nvidia-modprobe -u -c=0`), and load it at boot",
                item="uvm",
            )
        )
    return findings


def check_jetson(ctx: Context) -> list[Finding]:
    facts = ctx.jetson_facts
    l4t = facts.l4t_version if facts else None
    jetpack = f", JetPack {facts.jetpack_version}" if facts and facts.jetpack_version else ""
    if l4t is None:
        return [
            Finding(
                "WARN",
                f"Jetson found but its L4T release is unknown (no readable {ctx.shown(TEGRA_RELEASE)})",
                "the GPU driver (nvgpu) comes with L4T/JetPack: check that the board runs an NVIDIA "
                "L4T image",
            )
        ]
    return [Finding("PASS", f"L4T {l4t}{jetpack}: the GPU driver (nvgpu) is part of the L4T kernel")]
