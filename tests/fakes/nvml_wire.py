"""The wire side of the fake NVML library: return codes, struct versions, ctypes out-parameters.

The bindings pass ``byref()`` out-parameters, string buffers and versioned structs, as they do
to the real ``libnvidia-ml.so.1``; these helpers fill them the way the C library does.
"""

from __future__ import annotations

import ctypes
from typing import Any

MIB = 1024 * 1024

# NVML return codes, spelled out so the fake does not depend on the bindings' names for them.
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_UNKNOWN = 999

ERROR_STRINGS = {
    SUCCESS: "Success",
    ERROR_UNINITIALIZED: "Uninitialized",
    ERROR_INVALID_ARGUMENT: "Invalid Argument",
    ERROR_NOT_SUPPORTED: "Not Supported",
    ERROR_NOT_FOUND: "Not Found",
    ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    ERROR_TIMEOUT: "Timeout",
    ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    ERROR_GPU_IS_LOST: "GPU is lost",
    ERROR_RESET_REQUIRED: "GPU requires reset",
    ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    ERROR_UNKNOWN: "Unknown Error",
}

# Struct versions the versioned ("V" / "_v2") calls insist on, as in nvml.h.
MEMORY_V2 = 0x02000028
GI_PROFILE_INFO_V2 = 0x02000098
CI_PROFILE_INFO_V2 = 0x02000088
FABRIC_INFO_V2 = 0x02000024
FABRIC_INFO_V3 = 0x03000028
FABRIC_STATE_NOT_SUPPORTED = 0
FABRIC_STATE_COMPLETED = 3


def as_int(value: Any) -> int:
    return int(getattr(value, "value", value))


def target_of(out: Any) -> Any:
    """The ctypes object behind a ``byref()``/``pointer()`` argument, or None (passed by value)."""
    obj = getattr(out, "_obj", None)  # byref() answers a CArgObject holding the target in _obj
    if obj is not None:
        return obj
    if isinstance(out, ctypes._Pointer):
        return out.contents
    return None


def has_version(out: Any, *versions: int) -> bool:
    """Versioned structs carry their version first; NVML refuses a struct it does not know."""
    target = target_of(out)
    return target is not None and getattr(target, "version", None) in versions


def put(out: Any, **values: Any) -> int:
    target = target_of(out)
    if target is None:
        return ERROR_INVALID_ARGUMENT
    for key, value in values.items():
        setattr(target, key, value)
    return SUCCESS


def put_handle(out: Any, value: int) -> int:
    target = target_of(out)
    if target is None:
        return ERROR_INVALID_ARGUMENT
    ctypes.c_void_p.from_buffer(target).value = value
    return SUCCESS


def put_str(buf: Any, length: Any, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > as_int(length):
        return ERROR_INSUFFICIENT_SIZE
    buf.value = data
    return SUCCESS


def nvml_bus_id(given: str | None, index: int) -> str:
    """A PCI bus id in NVML's spelling (8-hex-digit domain, upper case)."""
    if given is None:
        return f"00000000:{(index + 1) * 0x10 & 0xFF:02X}:00.0"
    domain, bus, rest = given.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's "00000000:07:00.0" as sysfs names the device: "0000:07:00.0"."""
    domain, bus, rest = bus_id.split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{rest.lower()}"


def plain_config_space() -> bytes:
    config = bytearray(256)
    config[0:4] = bytes([0xDE, 0x10, 0xB0, 0x20])  # vendor 10de, some device id
    return bytes(config)


def vgpu_config_space(version: str | None, branch: str | None) -> bytes:
    """PCI config space of a vGPU guest device: an NVIDIA vendor capability signed "VF"."""
    config = bytearray(plain_config_space())
    config[6] |= 0x10  # status: capability list present
    config[0x34] = 0x40  # first capability
    record = bytes([0x00, 22]) + (version or "").encode()[:10].ljust(10, b"\0")
    record += (branch or "").encode()[:10].ljust(10, b"\0")
    cap = bytes([0x09, 0x00, 5 + len(record)]) + b"VF" + record
    config[0x40 : 0x40 + len(cap)] = cap
    return bytes(config)
