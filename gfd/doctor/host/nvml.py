"""Layer 3: does the user-mode driver library (NVML) load, and does it match the kernel module?

NVML is read once per run, by the daemon's own backend: the same library search, the same decoding. What it
reports is what the layers above judge by, including each GPU that cannot be used (which one, which error,
which layer: hardware, driver or fabric), as the daemon reports it.
"""

from __future__ import annotations

from pathlib import Path

from gfd.backends import LIBRARY_DIRS, nvml_library
from gfd.backends.errors import BackendError, NvmlFailed
from gfd.backends.gpu_health import FIXES
from gfd.backends.nvml import NvmlBackend
from gfd.backends.nvml_errors import (
    LIB_RM_VERSION_MISMATCH,
    LIBRARY_NOT_FOUND,
    Advice,
    init_advice,
    nvml_reason,
    version_mismatch,
)
from gfd.doctor.host.context import Context
from gfd.doctor.model import Finding, Status
from gfd.inventory import GpuFailure, Inventory


def library_versions(root: Path) -> list[str]:
    """The versions in the names of the libnvidia-ml.so.<version> files: known even when NVML refuses to
    start."""
    found: set[str] = set()
    for rel in LIBRARY_DIRS:
        for lib in (root / rel).glob("libnvidia-ml.so.*.*"):
            found.add(lib.name.removeprefix("libnvidia-ml.so."))
    return sorted(found)


def check(ctx: Context) -> list[Finding]:
    # In a container without the driver's library (e.g. `kubectl debug node/...`), the host's own
    # libnvidia-ml.so.1 under --host-root, as the daemon takes it from below its driver root.
    backend = NvmlBackend(host_root=ctx.host_root, library=nvml_library(ctx.host_root))
    try:
        inventory = backend.probe()
    except ModuleNotFoundError as err:  # the backend imports the bindings when it probes
        if err.name != "pynvml":
            raise
        return [Finding("FAIL", "the nvidia-ml-py package is missing", "`pip install nvidia-ml-py`")]
    except NvmlFailed as err:
        if err.at_init:
            return _init_failed(ctx, err.code)
        return [_query_failed(nvml_reason(err.code))]
    except BackendError as err:
        return [_query_failed(err.message)]
    ctx.nvml = inventory
    return _compare(ctx, inventory)


def _query_failed(reason: str) -> Finding:
    return Finding("FAIL", f"NVML started but a query failed: {reason}", "check `nvidia-smi` and `dmesg`")


def _compare(ctx: Context, inventory: Inventory) -> list[Finding]:
    reported = inventory.driver_version  # None where this driver does not say (a warning in the daemon)
    version = reported or "(version not reported)"
    names = [d.name for d in inventory.devices]
    kernel = ctx.kernel_version
    compared = kernel is not None and reported is not None
    if compared and kernel != reported:
        return [_advice(version_mismatch(reported, kernel))]
    failing = inventory.health.failures if inventory.health is not None else ()
    if not names and failing:
        return [
            Finding(
                "FAIL",
                f"NVML {version} loaded but none of its GPUs can be used: "
                + "; ".join(_failure(f) for f in failing),
                FIXES[failing[0].layer],
            )
        ]
    if not names and not ctx.jetson:
        return [
            Finding(
                "FAIL",
                f"NVML {version} loaded but sees no GPU although the PCI bus has {len(ctx.pci_gpus)}",
                "see `nvidia-smi` and `sudo dmesg | grep -i nvrm` (GPU fallen off the bus, or in use "
                "by a VM)",
            )
        ]
    shown = ", ".join(sorted(set(names))) or "none"
    agree = "matches the kernel module" if compared else "loaded"
    findings = [Finding("PASS", f"NVML {version} {agree}; {len(names)} GPU(s): {shown}")]
    # Each GPU that cannot be used: the node still works with the others, and is labelled degraded.
    findings += [Finding("WARN", _failure(f), FIXES[f.layer], item=_item(f)) for f in failing]
    if ctx.pci_gpus and len(names) + len(failing) < len(ctx.pci_gpus):
        findings.append(
            Finding(
                "WARN",
                f"NVML sees {len(names)} of the {len(ctx.pci_gpus)} GPUs on the PCI bus",
                "a GPU may have fallen off the bus or be bound to vfio-pci; check `sudo dmesg | grep -i xid`",
                item="count",
            )
        )
    return findings


def _failure(failure: GpuFailure) -> str:
    error = f"{failure.error} ({failure.detail})" if failure.detail else failure.error
    doing = f" reading {failure.doing}" if failure.doing else ""
    return f"{failure.where} cannot be used: {error}{doing}; layer: {failure.layer}"


def _item(failure: GpuFailure) -> str:
    return f"GPU {failure.pci_bus_id}" if failure.pci_bus_id else f"GPU {failure.index}"


def _advice(advice: Advice) -> Finding:
    return Finding("FAIL", advice.problem, advice.fix)


def _init_failed(ctx: Context, code: int) -> list[Finding]:
    if code == LIB_RM_VERSION_MISMATCH:
        # The library refused to start, so its version comes from the file names next to it.
        libs = library_versions(ctx.host_root)
        other = [v for v in libs if v != ctx.kernel_version]
        library = other[0] if other else (libs[0] if libs else None)
        return [_advice(version_mismatch(library, ctx.kernel_version))]
    if ctx.jetson:
        # Before JetPack 6 there is no NVML on a Jetson, and gfd reads the tegra files instead.
        status: Status = "SKIP" if code == LIBRARY_NOT_FOUND else "WARN"
        reason = nvml_reason(code)
        return [
            Finding(status, f"no usable NVML on this Jetson ({reason}); gfd uses the tegra files instead")
        ]
    advice = init_advice(code, ctx.host_root)
    if advice is not None:
        return [_advice(advice)]
    return [
        Finding(
            "FAIL",
            f"NVML failed to start: {nvml_reason(code)}",
            "run `nvidia-smi` for the driver's own message",
        )
    ]
