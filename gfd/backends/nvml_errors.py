"""NVML failures as one line a user can act on, naming the broken layer of the GPU stack.

The layers, from the bottom: the GPU itself ("hardware"), the kernel module ("driver"), the
user-space library ("nvml"), and the container runtime that mounts that library and the device
nodes into the pod ("container-toolkit").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gfd.backends import decoding
from gfd.backends.errors import Layer, NvmlFailed
from gfd.backends.host import kernel_module_version
from gfd.inventory import FailureLayer

# NVML return codes (nvml.h), spelled out so this module does not import the bindings.
UNINITIALIZED = 1
NO_PERMISSION = 4
INSUFFICIENT_POWER = 8
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
IRQ_ISSUE = 11
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
CORRUPTED_INFOROM = 14
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999

_NAMES = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    6: "Not Found",
    INSUFFICIENT_POWER: "Insufficient External Power",
    DRIVER_NOT_LOADED: "Driver Not Loaded",
    10: "Timeout",
    IRQ_ISSUE: "Interrupt Request Issue",
    LIBRARY_NOT_FOUND: "Library Not Found",
    FUNCTION_NOT_FOUND: "Function Not Found",
    CORRUPTED_INFOROM: "Corrupted infoROM",
    GPU_IS_LOST: "GPU is lost",
    RESET_REQUIRED: "GPU requires reset",
    LIB_RM_VERSION_MISMATCH: "Driver/library version mismatch",
    UNKNOWN: "Unknown Error",
}

# The names nvml.h gives the codes, the ones a user finds in NVIDIA's documentation and forums.
_SYMBOLS = {
    UNINITIALIZED: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    NO_PERMISSION: "NVML_ERROR_NO_PERMISSION",
    6: "NVML_ERROR_NOT_FOUND",
    INSUFFICIENT_POWER: "NVML_ERROR_INSUFFICIENT_POWER",
    DRIVER_NOT_LOADED: "NVML_ERROR_DRIVER_NOT_LOADED",
    TIMEOUT: "NVML_ERROR_TIMEOUT",
    IRQ_ISSUE: "NVML_ERROR_IRQ_ISSUE",
    LIBRARY_NOT_FOUND: "NVML_ERROR_LIBRARY_NOT_FOUND",
    FUNCTION_NOT_FOUND: "NVML_ERROR_FUNCTION_NOT_FOUND",
    CORRUPTED_INFOROM: "NVML_ERROR_CORRUPTED_INFOROM",
    GPU_IS_LOST: "NVML_ERROR_GPU_IS_LOST",
    RESET_REQUIRED: "NVML_ERROR_RESET_REQUIRED",
    LIB_RM_VERSION_MISMATCH: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    UNKNOWN: "NVML_ERROR_UNKNOWN",
}

# Codes that say the whole stack is broken, not one GPU: a read that answers one of these fails the pass.
STACK_WIDE = frozenset(
    {UNINITIALIZED, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, LIB_RM_VERSION_MISMATCH}
)
# Per-GPU codes that mean the GPU or its board: fallen off the bus, needing a reset, a damaged infoROM,
# missing power, a broken interrupt line, a GPU that does not answer in time. Any other code on one GPU
# is the driver's answer about it ("driver").
_HARDWARE = frozenset(
    {GPU_IS_LOST, RESET_REQUIRED, CORRUPTED_INFOROM, INSUFFICIENT_POWER, IRQ_ISSUE, TIMEOUT}
)

_TOOLKIT_HINT = (
    "run the pod with runtimeClassName: nvidia (or make nvidia the default container runtime) "
    "and NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility"
)

# Where the running process maps its libraries; a module attribute so tests can point it elsewhere.
SELF_MAPS = Path("/proc/self/maps")


def nvml_reason(code: int) -> str:
    """The return code's name as the bindings spell it: "GPU is lost"."""
    return _NAMES.get(code, f"error {code}")


def nvml_code_name(code: int) -> str:
    return f"NVML: {nvml_reason(code)}"


def nvml_symbol(code: int) -> str:
    """The return code as nvml.h names it: "NVML_ERROR_GPU_IS_LOST"."""
    return _SYMBOLS.get(code, f"NVML error {code}")


def gpu_failure_layer(code: int) -> FailureLayer:
    """Where a GPU that answered ``code`` has its problem."""
    return "hardware" if code in _HARDWARE else "driver"


@dataclass(frozen=True)
class Advice:
    """What a failed nvmlInit means (``problem``) and what to do about it (``fix``), for daemon and doctor."""

    layer: Layer
    problem: str
    fix: str | None = None

    def line(self) -> str:
        return f"{self.problem}: {self.fix}" if self.fix else self.problem


def version_mismatch(library: str | None, kernel_module: str | None) -> Advice:
    versions = ""
    if library or kernel_module:
        versions = f" (NVML library {library or 'unknown'}, kernel module {kernel_module or 'unknown'})"
    return Advice(
        "driver",
        f"driver/library version mismatch{versions}",
        "the driver was upgraded but the old kernel module is still loaded; reboot the node (or unload and "
        "reload the nvidia kernel modules)",
    )


def init_advice(code: int, host_root: Path) -> Advice | None:
    """Why nvmlInit failed with ``code``, and what to do; None for a code with no advice of its own."""
    if code == LIBRARY_NOT_FOUND:
        kmod = kernel_module_version(host_root)
        if kmod is not None or _in_container():
            loaded = f"the NVIDIA kernel module {kmod} is loaded but " if kmod else ""
            return Advice(
                "container-toolkit", f"{loaded}libnvidia-ml.so.1 is not in this container", _TOOLKIT_HINT
            )
        return Advice(
            "nvml",
            "libnvidia-ml.so.1 not found and no NVIDIA kernel module is loaded",
            f"install the NVIDIA driver on this node (inside a container: {_TOOLKIT_HINT})",
        )
    if code == DRIVER_NOT_LOADED:
        return Advice(
            "driver",
            f"the NVIDIA kernel module is not loaded ({nvml_code_name(code)})",
            "check that the driver installation finished and load it (modprobe nvidia); nvidia-smi on the "
            "node fails the same way",
        )
    if code == LIB_RM_VERSION_MISMATCH:
        return version_mismatch(_library_version(), kernel_module_version(host_root))
    if code == NO_PERMISSION:
        return Advice(
            "container-toolkit",
            f"no permission to open the GPU device nodes ({nvml_code_name(code)})",
            _TOOLKIT_HINT,
        )
    if code == FUNCTION_NOT_FOUND:
        return Advice("nvml", f"libnvidia-ml.so.1 is too old for these bindings ({nvml_code_name(code)})")
    return None


def init_error(code: int, host_root: Path) -> NvmlFailed:
    """Why nvmlInit failed, and what to do about it."""
    advice = init_advice(code, host_root)
    layer, line = (
        (advice.layer, advice.line()) if advice is not None else _reading(code, "initialising NVML", None)
    )
    return NvmlFailed(layer, line, code, at_init=True)


def probe_error(code: int, what: str, gpu: int | None) -> NvmlFailed:
    """A failure while reading ``what`` (on GPU ``gpu``, when known)."""
    return NvmlFailed(*_reading(code, what, gpu), code, at_init=False, gpu=gpu, what=what)


def _reading(code: int, what: str, gpu: int | None) -> tuple[Layer, str]:
    gpu_name = f"GPU {gpu}" if gpu is not None else "a GPU"
    on = f" on GPU {gpu}" if gpu is not None else ""
    reason = nvml_code_name(code)
    if code == GPU_IS_LOST:
        return (
            "hardware",
            f"{gpu_name} fell off the bus while reading {what} ({reason}): check the kernel log for Xid 79, "
            "then reset the GPU or reboot the node",
        )
    if code in (RESET_REQUIRED, CORRUPTED_INFOROM, INSUFFICIENT_POWER, IRQ_ISSUE):
        return "hardware", f"{gpu_name} is unhealthy ({reason}) while reading {what}: reset the GPU or reboot"
    if code in (DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH):
        return "driver", f"the NVIDIA driver failed while reading {what}{on} ({reason})"
    return "nvml", f"reading {what}{on} failed ({reason}); run gfd doctor for the whole stack"


def _library_version() -> str | None:
    try:
        return decoding.library_version_from_maps(SELF_MAPS.read_text(errors="replace"))
    except OSError:
        return None


def _in_container() -> bool:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return any(Path(p).exists() for p in ("/.dockerenv", "/run/.containerenv"))
