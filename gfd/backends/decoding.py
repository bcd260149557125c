"""Pure decoders for what the backends and the doctor read: MIG profile names, PCI ids, classes and config
space, versions.

No NVML and no file access here, so each rule can be tested with plain values.
"""

from __future__ import annotations

import math
import re

from gfd.inventory import VGpuInfo

MIB = 1024 * 1024
GIB = 1024 * MIB

# nvmlGpuInstanceProfile ids (nvml.h; the values are ABI) -> (GPU slices, name suffix). The
# suffixes follow NVIDIA's MIG naming: REV1 profiles carry the media extensions (+me), ALL_ME
# all of them, GFX graphics, NO_ME explicitly none; REV2 is the double-memory 1-slice profile.
GI_PROFILES: dict[int, tuple[int, str]] = {
    0x0: (1, ""),
    0x1: (2, ""),
    0x2: (3, ""),
    0x3: (4, ""),
    0x4: (7, ""),
    0x5: (8, ""),
    0x6: (6, ""),
    0x7: (1, "+me"),
    0x8: (2, "+me"),
    0x9: (1, ""),
    0xA: (1, "+gfx"),
    0xB: (2, "+gfx"),
    0xC: (4, "+gfx"),
    0xD: (1, "-me"),
    0xE: (2, "-me"),
    0xF: (1, "+me.all"),
    0x10: (2, "+me.all"),
    0x11: (3, "+gfx"),
}
GI_PROFILE_COUNT = 0x12
# nvmlComputeInstanceProfile ids -> compute slices (0x7 is the 1-slice REV1, 0x8 the 7-slice NVL).
CI_PROFILES: dict[int, int] = {0x0: 1, 0x1: 2, 0x2: 3, 0x3: 4, 0x4: 7, 0x5: 8, 0x6: 6, 0x7: 1, 0x8: 7}
CI_PROFILE_COUNT = 0x9
CI_ENGINE_PROFILE_COUNT = 0x1


def mig_memory_gb(device_total_bytes: int, mig_memory_mib: int) -> int:
    """The "Ngb" of a MIG profile name, as NVIDIA derives it.

    The MIG memory is taken as a fraction of the whole GPU, rounded up to eighths, times the
    GPU's size in whole GiB (rounded up), rounded half away from zero: an A100-40GB slice of
    4864 MiB is 1/8 of 40 GiB, so "5gb".
    """
    if device_total_bytes <= 0:
        return 0
    fraction = mig_memory_mib * MIB / device_total_bytes
    fraction = math.ceil(fraction * 8) / 8
    total_gib = (device_total_bytes + GIB - 1) // GIB
    return math.floor(fraction * total_gib + 0.5)


def mig_profile_name(
    gi_profile_id: int, ci_profile_id: int, device_total_bytes: int, mig_memory_mib: int
) -> str:
    """NVIDIA's profile name for a MIG device: "1g.5gb", "1c.3g.20gb", "1g.10gb+me", ...

    Raises ValueError for a profile id this table does not know (a newer driver).
    """
    if gi_profile_id not in GI_PROFILES:
        raise ValueError(f"unknown GPU instance profile id {gi_profile_id}")
    if ci_profile_id not in CI_PROFILES:
        raise ValueError(f"unknown compute instance profile id {ci_profile_id}")
    g, suffix = GI_PROFILES[gi_profile_id]
    c = CI_PROFILES[ci_profile_id]
    gb = mig_memory_gb(device_total_bytes, mig_memory_mib)
    head = f"{g}g.{gb}gb" if c == g else f"{c}c.{g}g.{gb}gb"
    return head + suffix


def profile_name_from_nvml(name: str) -> str | None:
    """The profile from a versioned profile-info name: "MIG 1g.5gb" -> "1g.5gb"."""
    name = name.strip()
    if name.startswith("MIG "):
        name = name[4:].strip()
    return name or None


def sysfs_bus_id(nvml_bus_id: str) -> str | None:
    """NVML's "00000000:07:00.0" as sysfs names the device, "0000:07:00.0"; None if malformed."""
    match = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", nvml_bus_id.strip())
    if match is None:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


# PCI class codes (PCI Code and ID Assignment spec): base class, then base class and subclass together.
PCI_BASE_DISPLAY = 0x03
PCI_BASE_BRIDGE = 0x06  # NVSwitch shows up as one
PCI_VGA_CONTROLLER = 0x0300  # a GPU that drives displays: gpu.mode "graphics"
PCI_3D_CONTROLLER = 0x0302  # a GPU without display outputs: gpu.mode "compute"
PCI_AUDIO = 0x0403  # a GPU's HDMI audio function
# Whole 24-bit classes (base class, subclass, programming interface) as NVIDIA's GFD compares them.
PCI_CLASS_VGA_CONTROLLER = PCI_VGA_CONTROLLER << 8  # 0x030000
PCI_CLASS_3D_CONTROLLER = PCI_3D_CONTROLLER << 8  # 0x030200


def parse_hex(text: str) -> int | None:
    """A sysfs hex attribute ("0x030200" in ``class``, "0x10de" in ``vendor``); None if malformed."""
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def clique_id(cluster_uuid: bytes, clique: int) -> str | None:
    """The gpu.clique value, "<clusterUuid>.<cliqueId>"; None for the all-zero (unset) cluster."""
    if len(cluster_uuid) != 16 or not any(cluster_uuid):
        return None
    import uuid  # here, not at the top: it loads platform too, and most nodes have no NVLink fabric

    return f"{uuid.UUID(bytes=bytes(cluster_uuid))}.{clique}"


def nvrm_version(text: str) -> str | None:
    """The version on the NVRM line of /proc/driver/nvidia/version ("... Kernel Module  550.54.15  ...")."""
    match = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", text + " ")
    return match.group(1) if match else None


def is_open_kernel_module(text: str) -> bool:
    """Whether /proc/driver/nvidia/version names the open kernel module ("Open Kernel Module for ...")."""
    return "Open Kernel Module" in text


def library_version_from_maps(text: str) -> str | None:
    """The NVML library version from /proc/self/maps: the file behind libnvidia-ml.so.1."""
    match = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)\b", text)
    return match.group(1) if match else None


# PCI config space layout (PCI Local Bus spec) and NVIDIA's vGPU vendor capability.
_STATUS = 0x06
_STATUS_CAP_LIST = 0x10
_CAP_POINTER = 0x34
_CAP_VENDOR_SPECIFIC = 0x09
_VGPU_SIGNATURE = b"VF"
_VGPU_RECORDS = 5  # records start after id, next, length and the two signature bytes
_HOST_VERSION_LEN = 10
_HOST_BRANCH_LEN = 10


class ConfigSpaceTooShort(ValueError):
    """Only the first 64 bytes are readable without privilege; the capability list needs 256."""


def vgpu_info(config: bytes) -> VGpuInfo | None:
    """vGPU facts from a device's PCI config space; None when it is not a vGPU guest device.

    A vGPU carries a vendor-specific capability whose payload starts with "VF"; its record 0
    holds the host driver version and branch (10 NUL-padded bytes each).
    """
    if len(config) < 256:
        raise ConfigSpaceTooShort(f"only {len(config)} bytes of PCI config space readable")
    if not config[_STATUS] & _STATUS_CAP_LIST:
        return None
    cap = _vendor_capability(config)
    if cap is None or cap[3:5] != _VGPU_SIGNATURE:
        return None
    pos = _VGPU_RECORDS
    # Walk the records (id, length, data...) to record 0, the host driver record.
    while pos + 1 < len(cap) and cap[pos] != 0:
        step = cap[pos + 1]
        if step == 0:
            return VGpuInfo()
        pos += step
    end = pos + 2 + _HOST_VERSION_LEN + _HOST_BRANCH_LEN
    if pos >= len(cap) or cap[pos] != 0 or end > len(cap):
        return VGpuInfo()  # a vGPU, but without a readable host driver record
    data = cap[pos + 2 : end]
    version = data[:_HOST_VERSION_LEN].strip(b"\0").decode("ascii", "replace") or None
    branch = data[_HOST_VERSION_LEN:].strip(b"\0").decode("ascii", "replace") or None
    return VGpuInfo(host_driver_version=version, host_driver_branch=branch)


def _vendor_capability(config: bytes) -> bytes | None:
    seen: set[int] = set()
    pos = config[_CAP_POINTER]
    while pos and pos not in seen and pos + 2 < len(config):
        seen.add(pos)
        cap_id, nxt, length = config[pos], config[pos + 1], config[pos + 2]
        if cap_id == 0xFF:
            return None  # broken chain
        if cap_id == _CAP_VENDOR_SPECIFIC:
            return config[pos : pos + length]
        pos = nxt
    return None
