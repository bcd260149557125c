"""Layer 3: does the user-mode driver library (NVML) load, and does it match the kernel module?"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path
from typing import Any

from gfd.doctor.model import Context, Finding, Status

# Where distributions and the container toolkit put libnvidia-ml.so.<version>; its file name carries the
# version, which is how we can show it even when the library refuses to start.
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/nvidia/lib64",
    "usr/lib/aarch64-linux-gnu/nvidia",
)


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
            candidate = ctx.host_root / rel / "libnvidia-ml.so.1"
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
        return [_mismatch(kernel, version)]
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


def _mismatch(kernel: str, library: str) -> Finding:
    return Finding(
        "FAIL",
        f"driver/library version mismatch: kernel module {kernel}, user-space library {library}",
        "the driver was upgraded but the old kernel module is still loaded: reboot the node (or stop GPU "
        "users and reload the nvidia modules); in a container, the host's library must be the one mounted",
    )


def _init_failed(ctx: Context, pynvml: Any, err: Exception) -> list[Finding]:
    if isinstance(err, pynvml.NVMLError_LibRmVersionMismatch):
        libs = library_versions(ctx.host_root)
        other = [v for v in libs if v != ctx.kernel_version]
        library = other[0] if other else (libs[0] if libs else "unknown")
        return [_mismatch(ctx.kernel_version or "unknown", library)]
    if ctx.jetson:
        # Before JetPack 6 there is no NVML on a Jetson, and gfd reads the tegra files instead.
        status: Status = "SKIP" if isinstance(err, pynvml.NVMLError_LibraryNotFound) else "WARN"
        return [Finding(status, f"no usable NVML on this Jetson ({err}); gfd uses the tegra files instead")]
    if isinstance(err, pynvml.NVMLError_LibraryNotFound):
        return [
            Finding(
                "FAIL",
                "libnvidia-ml.so.1 (the driver's user-space library) cannot be loaded",
                "on the host, install the driver's user-space part (it comes with the driver package); in a "
                "container, run it with the nvidia runtime (`runtimeClassName: nvidia`) so the "
                "library is mounted",
            )
        ]
    if isinstance(err, pynvml.NVMLError_DriverNotLoaded):
        return [Finding("FAIL", "NVML says the kernel driver is not loaded", "`sudo modprobe nvidia`")]
    if isinstance(err, pynvml.NVMLError_NoPermission):
        return [
            Finding(
                "FAIL",
                "NVML has no permission to open the GPU device nodes",
                "run as root or fix the /dev/nvidia* modes (layer 5 shows them)",
            )
        ]
    return [Finding("FAIL", f"NVML failed to start: {err}", "run `nvidia-smi` for the driver's own message")]
