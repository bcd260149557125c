"""Layer 3: does the user-mode driver library (NVML) load, and does it match the kernel module?"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path
from typing import Any

from gfd.backends import LIBRARY_DIRS, NVML_LIBRARY
from gfd.backends.nvml_errors import Advice, init_advice, version_mismatch
from gfd.doctor.model import Context, Finding, Status

# Where libnvidia-ml.so.<version> may be: where gfd looks below a driver root, then where other distributions
# and the container toolkit put it. Its file name carries the version, which is how it can be shown even
# when the library refuses to start.
LIB_DIRS = (*LIBRARY_DIRS, "usr/lib", "usr/local/nvidia/lib64", "usr/lib/aarch64-linux-gnu/nvidia")


def library_versions(root: Path) -> list[str]:
    found: set[str] = set()
    for rel in LIB_DIRS:
        for lib in (root / rel).glob("libnvidia-ml.so.*.*"):
            found.add(lib.name.removeprefix("libnvidia-ml.so."))
    return sorted(found)


def _init(ctx: Context, pynvml: Any) -> None:
    """nvmlInit; in a container without the driver's library (e.g. `kubectl debug node/...`), retry with
    the host's own libnvidia-ml.so.1 under --host-root."""
    try:
        pynvml.nvmlInit()
        return
    except pynvml.NVMLError_LibraryNotFound:
        if ctx.host_root.resolve() == Path("/"):
            raise
        for rel in LIB_DIRS:
            candidate = ctx.host_root / rel / NVML_LIBRARY
            if not candidate.exists():
                continue
            try:
                lib = ctypes.CDLL(str(candidate))
            except OSError:
                continue
            pynvml.nvmlLib = lib  # the bindings load the library once into this module global
            pynvml.nvmlInit()
            return
        raise


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check(ctx: Context) -> list[Finding]:
    try:
        import pynvml
    except ImportError:
        return [Finding("FAIL", "the nvidia-ml-py package is missing", "`pip install nvidia-ml-py`")]
    try:
        _init(ctx, pynvml)
    except pynvml.NVMLError as err:
        return _init_failed(ctx, pynvml, err)
    try:
        version = _text(pynvml.nvmlSystemGetDriverVersion())
        ctx.nvml_version = version
        try:
            ctx.cuda_driver_version = int(pynvml.nvmlSystemGetCudaDriverVersion())
        except pynvml.NVMLError:
            ctx.cuda_driver_version = None
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            names.append(_text(pynvml.nvmlDeviceGetName(handle)))
            with contextlib.suppress(pynvml.NVMLError):  # not on Jetson; then layer 5 counts the files
                ctx.nvml_minors.append(int(pynvml.nvmlDeviceGetMinorNumber(handle)))
        ctx.nvml_gpu_names = names
    except pynvml.NVMLError as err:
        return [Finding("FAIL", f"NVML started but a query failed: {err}", "check `nvidia-smi` and `dmesg`")]
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return _compare(ctx, version, names)


def _compare(ctx: Context, version: str, names: list[str]) -> list[Finding]:
    kernel = ctx.kernel_version
    if kernel is not None and kernel != version:
        return [_advice(version_mismatch(version, kernel))]
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
    agree = "matches the kernel module" if kernel is not None else "loaded"
    findings = [Finding("PASS", f"NVML {version} {agree}; {len(names)} GPU(s): {shown}")]
    if ctx.pci_gpus and len(names) < len(ctx.pci_gpus):
        findings.append(
            Finding(
                "WARN",
                f"NVML sees {len(names)} of the {len(ctx.pci_gpus)} GPUs on the PCI bus",
                "a GPU may have fallen off the bus or be bound to vfio-pci; check `sudo dmesg | grep -i xid`",
                item="count",
            )
        )
    return findings


def _advice(advice: Advice) -> Finding:
    return Finding("FAIL", advice.problem, advice.fix)


def _init_failed(ctx: Context, pynvml: Any, err: Any) -> list[Finding]:
    if isinstance(err, pynvml.NVMLError_LibRmVersionMismatch):
        # The library refused to start, so its version comes from the file names next to it.
        libs = library_versions(ctx.host_root)
        other = [v for v in libs if v != ctx.kernel_version]
        library = other[0] if other else (libs[0] if libs else None)
        return [_advice(version_mismatch(library, ctx.kernel_version))]
    if ctx.jetson:
        # Before JetPack 6 there is no NVML on a Jetson, and gfd reads the tegra files instead.
        status: Status = "SKIP" if isinstance(err, pynvml.NVMLError_LibraryNotFound) else "WARN"
        return [Finding(status, f"no usable NVML on this Jetson ({err}); gfd uses the tegra files instead")]
    advice = init_advice(err.value, ctx.host_root)
    if advice is not None:
        return [_advice(advice)]
    return [Finding("FAIL", f"NVML failed to start: {err}", "run `nvidia-smi` for the driver's own message")]
