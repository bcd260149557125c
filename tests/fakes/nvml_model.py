"""The fake NVML library's model of a machine: GPUs, MIG devices, and their handles."""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from gfd.machine_profile import DeviceSpec, MigDeviceSpec

# GPU instance profile ids (nvmlGpuInstanceProfile) by (slices, attribute suffix); the first id
# is used for the first memory size seen, the next (a REV2 "double memory" profile) for a second.
GI_IDS: dict[tuple[int, str], list[int]] = {
    (1, ""): [0x0, 0x9],
    (2, ""): [0x1],
    (3, ""): [0x2],
    (4, ""): [0x3],
    (7, ""): [0x4],
    (8, ""): [0x5],
    (6, ""): [0x6],
    (1, "+me"): [0x7],
    (2, "+me"): [0x8],
    (1, "+gfx"): [0xA],
    (2, "+gfx"): [0xB],
    (4, "+gfx"): [0xC],
    (1, "-me"): [0xD],
    (2, "-me"): [0xE],
    (1, "+me.all"): [0xF],
    (2, "+me.all"): [0x10],
    (3, "+gfx"): [0x11],
}
GI_PROFILE_COUNT = 0x12
# Compute instance profile ids (nvmlComputeInstanceProfile) by slice count.
CI_IDS = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
CI_PROFILE_COUNT = 0x9
CI_ENGINE_PROFILE_COUNT = 0x1


@dataclass
class FakeMig:
    """One MIG device: its GPU instance (own GI) with one compute instance."""

    gpu: FakeGpu
    index: int
    spec: MigDeviceSpec
    gi_profile_id: int
    ci_profile_id: int
    gi_id: int
    ci_id: int = 0
    handle: int = 0
    gi_handle: int = 0
    ci_handle: int = 0

    @property
    def uuid(self) -> str:
        return "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{self.gpu.uuid}/{self.index}"))


@dataclass
class FakeGpu:
    index: int
    spec: DeviceSpec
    uuid: str
    bus_id: str  # NVML form: 8-hex-digit domain, upper case, "00000000:07:00.0"
    handle: int = 0
    mig_current: int = 0
    mig_pending: int = 0
    migs: list[FakeMig] = field(default_factory=list)

    @property
    def mig_capable(self) -> bool:
        return self.spec.mig is not None


class HandleTable:
    """Opaque handles as the C library hands them out: pointer values naming a GPU, a MIG
    device, or a GPU / compute instance (("gi" | "ci", MIG device))."""

    _handles: dict[int, FakeGpu | FakeMig | tuple[str, FakeMig]]

    def _new_handle(self, obj: FakeGpu | FakeMig | tuple[str, FakeMig]) -> int:
        value = 0x1000 + 0x10 * len(self._handles)
        self._handles[value] = obj
        return value

    def _obj(self, handle: Any) -> FakeGpu | FakeMig | tuple[str, FakeMig] | None:
        try:
            value = ctypes.cast(handle, ctypes.c_void_p).value
        except (ctypes.ArgumentError, TypeError):
            return None
        return self._handles.get(value or 0)

    def _gpu_of(self, handle: Any) -> FakeGpu | None:
        obj = self._obj(handle)
        if isinstance(obj, FakeGpu):
            return obj
        if isinstance(obj, FakeMig):
            return obj.gpu
        if isinstance(obj, tuple):
            return obj[1].gpu
        return None

    def _device(self, handle: Any) -> FakeGpu | FakeMig | None:
        obj = self._obj(handle)
        return obj if isinstance(obj, FakeGpu | FakeMig) else None

    def _instance(self, handle: Any, kind: str) -> FakeMig | None:
        obj = self._obj(handle)
        return obj[1] if isinstance(obj, tuple) and obj[0] == kind else None


def gi_profile_id(m: MigDeviceSpec, used: dict[tuple[int, str], list[int]]) -> int:
    name = m.profile
    cut = min((i for i in (name.find("+"), name.find("-")) if i >= 0), default=len(name))
    key = (m.gi_slices, name[cut:])
    ids = GI_IDS.get(key, GI_IDS.get((m.gi_slices, ""), [0]))
    seen = used.setdefault(key, [])
    if m.memory_mib not in seen:
        seen.append(m.memory_mib)
    return ids[min(seen.index(m.memory_mib), len(ids) - 1)]
