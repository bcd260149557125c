"""A fake NVML C library for the unmodified ``pynvml`` bindings (nvidia-ml-py).

``FakeNvml`` stands in for the ``CDLL("libnvidia-ml.so.1")`` object: each NVML
C symbol is an attribute, called by the bindings with the same ctypes arguments
the real library gets (``byref`` out-parameters, string buffers, versioned
structs). It fills those out-parameters and answers NVML return codes, so both
the bindings and our adapter run as they would on a real host. A symbol that
is absent makes the bindings raise ``NVMLError_FunctionNotFound`` themselves.

``install_fake_nvml`` puts it under ``pynvml`` for one test (via monkeypatch):

    fake = install_fake_nvml(monkeypatch, load_profile("profiles/dgx-a100-mig.yaml"))
    inv = NvmlBackend().probe()
    fake.calls["nvmlDeviceGetMemoryInfo"]  # how often the bindings called it

``fail`` maps a symbol to the return code it answers instead, e.g.
``{"nvmlDeviceGetMemoryInfo": NVML_ERROR_NOT_SUPPORTED}``; a key
``"<symbol>:<gpu index>"`` limits that to calls on one GPU (or its MIG
devices); ``NVML_ERROR_FUNCTION_NOT_FOUND`` removes the symbol altogether.
"""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gfd.profile import DeviceProfile, MachineProfile, MigDeviceProfile

MIB = 1024 * 1024

# NVML return codes, spelled out so the fake does not depend on the bindings' names for them.
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_ARGUMENT_VERSION_MISMATCH = 25

_ERROR_STRINGS = {
    SUCCESS: "Success",
    ERROR_UNINITIALIZED: "Uninitialized",
    ERROR_INVALID_ARGUMENT: "Invalid Argument",
    ERROR_NOT_SUPPORTED: "Not Supported",
    ERROR_NOT_FOUND: "Not Found",
    ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    ERROR_GPU_IS_LOST: "GPU is lost",
    ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
}

# Struct versions the versioned ("V" / "_v2") calls insist on, as in nvml.h.
MEMORY_V2 = 0x02000028
GI_PROFILE_INFO_V2 = 0x02000098
GI_PROFILE_INFO_V3 = 0x03000098
CI_PROFILE_INFO_V2 = 0x02000088
CI_PROFILE_INFO_V3 = 0x03000088
FABRIC_INFO_V2 = 0x02000024
FABRIC_INFO_V3 = 0x03000028

# GPU instance profile ids (nvmlGpuInstanceProfile) by (slices, attribute suffix); the first id
# is used for the first memory size seen, the next (a REV2 "double memory" profile) for a second.
_GI_IDS: dict[tuple[int, str], list[int]] = {
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
_GI_PROFILE_COUNT = 0x12
# Compute instance profile ids (nvmlComputeInstanceProfile) by slice count.
_CI_IDS = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
_CI_PROFILE_COUNT = 0x9
_CI_ENGINE_PROFILE_COUNT = 0x1
_FABRIC_STATE_NOT_SUPPORTED = 0
_FABRIC_STATE_COMPLETED = 3


@dataclass
class FakeMig:
    """One MIG device: its GPU instance (own GI) with one compute instance."""

    gpu: FakeGpu
    index: int
    spec: MigDeviceProfile
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
    spec: DeviceProfile
    uuid: str
    bus_id: str  # NVML form: 8-hex-digit domain, upper case, "00000000:07:00.0"
    handle: int = 0
    mig_current: int = 0
    mig_pending: int = 0
    migs: list[FakeMig] = field(default_factory=list)

    @property
    def mig_capable(self) -> bool:
        return self.spec.mig is not None


class _Symbol:
    """One C symbol: callable, and accepts ``restype``/``argtypes`` like a ctypes function."""

    def __init__(self, lib: FakeNvml, name: str, impl: Callable[..., Any]) -> None:
        self._lib = lib
        self.__name__ = name
        self._impl = impl
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self._lib._dispatch(self.__name__, self._impl, args)


class FakeNvml:
    """A fake ``libnvidia-ml.so.1`` answering NVML's C symbols from a machine profile.

    Each ``c_<symbol>`` method implements one C symbol; the instance exports it as ``<symbol>``.
    """

    def __init__(
        self,
        profile: MachineProfile | None,
        *,
        driver_not_loaded: bool = False,
        lib_version: str | None = None,
        fail: dict[str, int] | None = None,
    ) -> None:
        self.profile = profile or MachineProfile()
        self.driver_not_loaded = driver_not_loaded
        self.lib_version = lib_version
        self.fail: dict[str, int] = dict(fail or {})
        self._per_gpu_fail = any(":" in key for key in self.fail)
        self.calls: Counter[str] = Counter()
        self.init_count = 0
        self._handles: dict[int, FakeGpu | FakeMig | tuple[str, FakeMig]] = {}
        self.gpus = [self._make_gpu(i, d) for i, d in enumerate(self.profile.devices)]
        # The C symbols this library build exports, as instance attributes: any other NVML name is
        # an AttributeError, which the bindings turn into NVMLError_FunctionNotFound.
        for attr, impl in vars(type(self)).items():
            name = attr[2:]
            if attr.startswith("c_nvml") and self.fail.get(name) != ERROR_FUNCTION_NOT_FOUND:
                setattr(self, name, _Symbol(self, name, impl.__get__(self)))

    # ---- set-up -------------------------------------------------------------------------------

    def _new_handle(self, obj: FakeGpu | FakeMig | tuple[str, FakeMig]) -> int:
        value = 0x1000 + 0x10 * len(self._handles)
        self._handles[value] = obj
        return value

    def _make_gpu(self, index: int, spec: DeviceProfile) -> FakeGpu:
        gpu_uuid = spec.uuid or "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{spec.name}/{index}"))
        gpu = FakeGpu(index=index, spec=spec, uuid=gpu_uuid, bus_id=_nvml_bus_id(spec.pci_bus_id, index))
        gpu.handle = self._new_handle(gpu)
        if spec.mig is not None and spec.mig.enabled:
            gpu.mig_current = gpu.mig_pending = 1
            used: dict[tuple[int, str], list[int]] = {}
            for j, m in enumerate(spec.mig.devices):
                mig = FakeMig(
                    gpu=gpu,
                    index=j,
                    spec=m,
                    gi_profile_id=_gi_profile_id(m, used),
                    ci_profile_id=_CI_IDS.get(m.ci_slices, 0),
                    gi_id=j + 1,
                )
                mig.handle = self._new_handle(mig)
                mig.gi_handle = self._new_handle(("gi", mig))
                mig.ci_handle = self._new_handle(("ci", mig))
                gpu.migs.append(mig)
        return gpu

    def write_host_root(self, root: Path) -> Path:
        """Lay out the host files read beside NVML: PCI class and config space, kernel module version."""
        if not self.driver_not_loaded and self.profile.driver_version is not None:
            proc = root / "proc/driver/nvidia"
            proc.mkdir(parents=True, exist_ok=True)
            (proc / "version").write_text(
                f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {self.profile.driver_version}  "
                "Release Build  (dvs-builder@U16-T02-35-3)  Tue Mar  5 22:23:56 UTC 2024\n"
                "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
            )
        for gpu in self.gpus:
            d = root / "sys/bus/pci/devices" / sysfs_bus_id(gpu.bus_id)
            d.mkdir(parents=True, exist_ok=True)
            if gpu.spec.pci_class is not None:
                (d / "class").write_text(f"0x{int(gpu.spec.pci_class, 16):06x}\n")
            (d / "vendor").write_text("0x10de\n")
            vgpu = gpu.spec.vgpu
            config = (
                vgpu_config_space(vgpu.host_driver_version, vgpu.host_driver_branch)
                if vgpu
                else plain_config_space()
            )
            (d / "config").write_bytes(config)
        return root

    # ---- dispatch -----------------------------------------------------------------------------

    def _dispatch(self, name: str, impl: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.calls[name] += 1
        if name == "nvmlErrorString":
            return impl(*args)
        code = self.fail.get(name)
        if code is None and args and self._per_gpu_fail:
            gpu = self._gpu_of(args[0])
            if gpu is not None:
                code = self.fail.get(f"{name}:{gpu.index}")
        if code is not None:
            return code
        if not name.startswith("nvmlInit") and self.init_count == 0:
            return ERROR_UNINITIALIZED
        return impl(*args)

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

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    # ---- init / system ------------------------------------------------------------------------

    def c_nvmlInitWithFlags(self, flags: Any) -> int:
        return self._init()

    def c_nvmlInit_v2(self) -> int:
        return self._init()

    def _init(self) -> int:
        if self.driver_not_loaded:
            return ERROR_DRIVER_NOT_LOADED
        if self.lib_version is not None:
            return ERROR_LIB_RM_VERSION_MISMATCH
        self.init_count += 1
        return SUCCESS

    def c_nvmlShutdown(self) -> int:
        self.init_count -= 1
        return SUCCESS

    def c_nvmlErrorString(self, code: Any) -> bytes:
        return _ERROR_STRINGS.get(_int(code), "Unknown Error").encode()

    def c_nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        if self.profile.driver_version is None:
            return ERROR_NOT_SUPPORTED
        return _put_str(buf, length, self.profile.driver_version)

    def c_nvmlSystemGetNVMLVersion(self, buf: Any, length: Any) -> int:
        if self.profile.driver_version is None:
            return ERROR_NOT_SUPPORTED
        major = (self.profile.cuda_driver_version or 12000) // 1000
        return _put_str(buf, length, f"{major}.{self.profile.driver_version}")

    def c_nvmlSystemGetCudaDriverVersion(self, out: Any) -> int:
        return self._cuda_version(out)

    def c_nvmlSystemGetCudaDriverVersion_v2(self, out: Any) -> int:
        return self._cuda_version(out)

    def _cuda_version(self, out: Any) -> int:
        if self.profile.cuda_driver_version is None:
            return ERROR_NOT_SUPPORTED
        return _put(out, value=self.profile.cuda_driver_version)

    # ---- devices ------------------------------------------------------------------------------

    def c_nvmlDeviceGetCount_v2(self, out: Any) -> int:
        return _put(out, value=len(self.gpus))

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        i = _int(index)
        if not 0 <= i < len(self.gpus):
            return ERROR_INVALID_ARGUMENT
        return _put_handle(out, self.gpus[i].handle)

    def c_nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> int:
        wanted = uuid.decode() if isinstance(uuid, bytes) else str(getattr(uuid, "value", uuid))
        for gpu in self.gpus:
            if gpu.uuid == wanted:
                return _put_handle(out, gpu.handle)
            for mig in gpu.migs:
                if mig.uuid == wanted:
                    return _put_handle(out, mig.handle)
        return ERROR_NOT_FOUND

    def c_nvmlDeviceGetName(self, handle: Any, buf: Any, length: Any) -> int:
        dev = self._device(handle)
        if dev is None:
            return ERROR_INVALID_ARGUMENT
        if isinstance(dev, FakeMig):
            return _put_str(buf, length, f"{dev.gpu.spec.name} MIG {dev.spec.profile}")
        return _put_str(buf, length, dev.spec.name)

    def c_nvmlDeviceGetUUID(self, handle: Any, buf: Any, length: Any) -> int:
        dev = self._device(handle)
        if dev is None:
            return ERROR_INVALID_ARGUMENT
        return _put_str(buf, length, dev.uuid)

    def c_nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> int:
        total = self._memory_bytes(handle)
        if total is None:
            return ERROR_NOT_SUPPORTED
        return _put(out, total=total, free=total - 2 * MIB, used=2 * MIB)

    def c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, out: Any) -> int:
        if not _has_version(out, MEMORY_V2):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        total = self._memory_bytes(handle)
        if total is None:
            return ERROR_NOT_SUPPORTED
        return _put(out, total=total, reserved=MIB, free=total - 3 * MIB, used=2 * MIB)

    def _memory_bytes(self, handle: Any) -> int | None:
        dev = self._device(handle)
        if isinstance(dev, FakeMig):
            return dev.spec.memory_mib * MIB
        if dev is None or dev.spec.memory_mib is None:
            return None
        return dev.spec.memory_mib * MIB

    def c_nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        dev = self._device(handle)
        gpu = dev.gpu if isinstance(dev, FakeMig) else dev
        if gpu is None or gpu.spec.compute_capability is None:
            return ERROR_NOT_SUPPORTED
        ma, _, mi = gpu.spec.compute_capability.partition(".")
        _put(major, value=int(ma))
        return _put(minor, value=int(mi))

    def c_nvmlDeviceGetPciInfo_v3(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        gpu = dev.gpu if isinstance(dev, FakeMig) else dev
        if gpu is None:
            return ERROR_INVALID_ARGUMENT
        domain, bus, rest = gpu.bus_id.split(":")
        device = rest.split(".")[0]
        return _put(
            out,
            busIdLegacy=f"{int(domain, 16):04X}:{bus}:{rest}".encode(),
            busId=gpu.bus_id.encode(),
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(device, 16),
            pciDeviceId=0x000010DE,
            pciSubSystemId=0,
        )

    def c_nvmlDeviceGetMinorNumber(self, handle: Any, out: Any) -> int:
        gpu = self._gpu_of(handle)
        return ERROR_INVALID_ARGUMENT if gpu is None else _put(out, value=gpu.index)

    # ---- MIG ----------------------------------------------------------------------------------

    def c_nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        _put(current, value=dev.mig_current)
        return _put(pending, value=dev.mig_pending)

    def c_nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        return _put(out, value=max(7, len(dev.migs)))

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        i = _int(index)
        if not 0 <= i < len(dev.migs):
            return ERROR_NOT_FOUND
        return _put_handle(out, dev.migs[i].handle)

    def c_nvmlDeviceIsMigDeviceHandle(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return ERROR_INVALID_ARGUMENT if dev is None else _put(out, value=int(isinstance(dev, FakeMig)))

    def c_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeMig):
            return ERROR_INVALID_ARGUMENT
        return _put_handle(out, dev.gpu.handle)

    def c_nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return _put(out, value=dev.gi_id) if isinstance(dev, FakeMig) else ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return _put(out, value=dev.ci_id) if isinstance(dev, FakeMig) else ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetAttributes_v2(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeMig):
            return ERROR_NOT_SUPPORTED
        m = dev.spec
        return _put(
            out,
            multiprocessorCount=m.multiprocessors,
            sharedCopyEngineCount=m.copy_engines,
            sharedDecoderCount=m.decoders,
            sharedEncoderCount=m.encoders,
            sharedJpegCount=m.jpegs,
            sharedOfaCount=m.ofas,
            gpuInstanceSliceCount=m.gi_slices,
            computeInstanceSliceCount=m.ci_slices,
            memorySizeMB=m.memory_mib,
        )

    def _gi_profile(self, handle: Any, profile: Any, out: Any, versioned: bool) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        if versioned and (
            _struct(out) is None or _struct(out).version not in (GI_PROFILE_INFO_V2, GI_PROFILE_INFO_V3)
        ):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        pid = _int(profile)
        if not 0 <= pid < _GI_PROFILE_COUNT:
            return ERROR_INVALID_ARGUMENT
        mig = next((m for m in dev.migs if m.gi_profile_id == pid), None)
        if mig is None:
            return ERROR_NOT_SUPPORTED
        m = mig.spec
        fields: dict[str, Any] = dict(
            id=pid,
            isP2pSupported=0,
            sliceCount=m.gi_slices,
            instanceCount=max(1, 7 // m.gi_slices),
            multiprocessorCount=m.multiprocessors,
            copyEngineCount=m.copy_engines,
            decoderCount=m.decoders,
            encoderCount=m.encoders,
            jpegCount=m.jpegs,
            ofaCount=m.ofas,
            memorySizeMB=m.memory_mib,
        )
        if versioned:
            fields["name"] = f"MIG {m.profile}".encode()
        return _put(out, **fields)

    def c_nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: Any, out: Any) -> int:
        return self._gi_profile(handle, profile, out, versioned=False)

    def c_nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, profile: Any, out: Any) -> int:
        return self._gi_profile(handle, profile, out, versioned=True)

    def c_nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu):
            return ERROR_INVALID_ARGUMENT
        mig = next((m for m in dev.migs if m.gi_id == _int(gi_id)), None)
        return ERROR_NOT_FOUND if mig is None else _put_handle(out, mig.gi_handle)

    def c_nvmlGpuInstanceGetInfo(self, gi: Any, out: Any) -> int:
        mig = self._instance(gi, "gi")
        if mig is None:
            return ERROR_INVALID_ARGUMENT
        info = _struct(out)
        if info is None:
            return ERROR_INVALID_ARGUMENT
        ctypes.c_void_p.from_buffer(info, type(info).device.offset).value = mig.gpu.handle
        info.id = mig.gi_id
        info.profileId = mig.gi_profile_id
        info.placement.start = sum(m.spec.gi_slices for m in mig.gpu.migs[: mig.index])
        info.placement.size = mig.spec.gi_slices
        return SUCCESS

    def c_nvmlGpuInstanceGetComputeInstanceById(self, gi: Any, ci_id: Any, out: Any) -> int:
        mig = self._instance(gi, "gi")
        if mig is None:
            return ERROR_INVALID_ARGUMENT
        return _put_handle(out, mig.ci_handle) if _int(ci_id) == mig.ci_id else ERROR_NOT_FOUND

    def c_nvmlComputeInstanceGetInfo_v2(self, ci: Any, out: Any) -> int:
        mig = self._instance(ci, "ci")
        info = _struct(out)
        if mig is None or info is None:
            return ERROR_INVALID_ARGUMENT
        ctypes.c_void_p.from_buffer(info, type(info).device.offset).value = mig.gpu.handle
        ctypes.c_void_p.from_buffer(info, type(info).gpuInstance.offset).value = mig.gi_handle
        info.id = mig.ci_id
        info.profileId = mig.ci_profile_id
        info.placement.start = 0
        info.placement.size = mig.spec.ci_slices
        return SUCCESS

    def _ci_profile(self, gi: Any, profile: Any, eng: Any, out: Any, versioned: bool) -> int:
        mig = self._instance(gi, "gi")
        if mig is None:
            return ERROR_INVALID_ARGUMENT
        if versioned and (
            _struct(out) is None or _struct(out).version not in (CI_PROFILE_INFO_V2, CI_PROFILE_INFO_V3)
        ):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        pid, eid = _int(profile), _int(eng)
        if not (0 <= pid < _CI_PROFILE_COUNT and 0 <= eid < _CI_ENGINE_PROFILE_COUNT):
            return ERROR_INVALID_ARGUMENT
        if pid != mig.ci_profile_id:
            return ERROR_NOT_SUPPORTED
        m = mig.spec
        fields: dict[str, Any] = dict(
            id=pid,
            sliceCount=m.ci_slices,
            instanceCount=max(1, m.gi_slices // m.ci_slices),
            multiprocessorCount=m.multiprocessors,
            sharedCopyEngineCount=m.copy_engines,
            sharedDecoderCount=m.decoders,
            sharedEncoderCount=m.encoders,
            sharedJpegCount=m.jpegs,
            sharedOfaCount=m.ofas,
        )
        if versioned:
            fields["name"] = f"MIG {m.profile}".encode()
        return _put(out, **fields)

    def c_nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: Any, pid: Any, eng: Any, out: Any) -> int:
        return self._ci_profile(gi, pid, eng, out, versioned=False)

    def c_nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gi: Any, pid: Any, eng: Any, out: Any) -> int:
        return self._ci_profile(gi, pid, eng, out, versioned=True)

    # ---- fabric (cliques) ---------------------------------------------------------------------

    def _fabric(self, handle: Any, out: Any) -> int:
        gpu = self._gpu_of(handle)
        info = _struct(out)
        if gpu is None or info is None:
            return ERROR_INVALID_ARGUMENT
        cc = gpu.spec.compute_capability
        if gpu.spec.clique is None:
            # Pre-Hopper GPUs have no fabric API; Hopper and later answer "not supported" as a state.
            if cc is None or int(cc.partition(".")[0]) < 9:
                return ERROR_NOT_SUPPORTED
            info.state = _FABRIC_STATE_NOT_SUPPORTED
            info.status = SUCCESS
            return SUCCESS
        cluster, _, clique = gpu.spec.clique.rpartition(".")
        raw = uuidlib.UUID(cluster).bytes
        for i, b in enumerate(raw):
            info.clusterUuid[i] = b
        info.cliqueId = int(clique)
        info.state = _FABRIC_STATE_COMPLETED
        info.status = SUCCESS
        return SUCCESS

    def c_nvmlDeviceGetGpuFabricInfo(self, handle: Any, out: Any) -> int:
        return self._fabric(handle, out)

    def c_nvmlDeviceGetGpuFabricInfoV(self, handle: Any, out: Any) -> int:
        if not _has_version(out, FABRIC_INFO_V2, FABRIC_INFO_V3):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        return self._fabric(handle, out)


# ---- ctypes helpers ---------------------------------------------------------------------------


def _int(value: Any) -> int:
    return int(getattr(value, "value", value))


def _struct(out: Any) -> Any:
    """The ctypes object behind a ``byref()``/``pointer()`` argument, or None (passed by value)."""
    obj = getattr(out, "_obj", None)  # byref() answers a CArgObject holding the target in _obj
    if obj is not None:
        return obj
    if isinstance(out, ctypes._Pointer):
        return out.contents
    return None


def _has_version(out: Any, *versions: int) -> bool:
    """Versioned structs carry their version first; NVML refuses a struct it does not know."""
    target = _struct(out)
    return target is not None and getattr(target, "version", None) in versions


def _put(out: Any, **values: Any) -> int:
    target = _struct(out)
    if target is None:
        return ERROR_INVALID_ARGUMENT
    for key, value in values.items():
        setattr(target, key, value)
    return SUCCESS


def _put_handle(out: Any, value: int) -> int:
    target = _struct(out)
    if target is None:
        return ERROR_INVALID_ARGUMENT
    ctypes.c_void_p.from_buffer(target).value = value
    return SUCCESS


def _put_str(buf: Any, length: Any, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > _int(length):
        return ERROR_INSUFFICIENT_SIZE
    buf.value = data
    return SUCCESS


def _nvml_bus_id(given: str | None, index: int) -> str:
    """A PCI bus id in NVML's spelling (8-hex-digit domain, upper case)."""
    if given is None:
        return f"00000000:{(index + 1) * 0x10 & 0xFF:02X}:00.0"
    domain, bus, rest = given.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's "00000000:07:00.0" as sysfs names the device: "0000:07:00.0"."""
    domain, bus, rest = nvml_bus_id.split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{rest.lower()}"


def _gi_profile_id(m: MigDeviceProfile, used: dict[tuple[int, str], list[int]]) -> int:
    name = m.profile
    cut = min((i for i in (name.find("+"), name.find("-")) if i >= 0), default=len(name))
    key = (m.gi_slices, name[cut:])
    ids = _GI_IDS.get(key, _GI_IDS.get((m.gi_slices, ""), [0]))
    seen = used.setdefault(key, [])
    if m.memory_mib not in seen:
        seen.append(m.memory_mib)
    return ids[min(seen.index(m.memory_mib), len(ids) - 1)]


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


def _missing_library(name: str, *args: Any, **kwargs: Any) -> Any:
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def install_fake_nvml(
    monkeypatch: pytest.MonkeyPatch,
    profile: MachineProfile | None,
    *,
    library_missing: bool = False,
    driver_not_loaded: bool = False,
    lib_version: str | None = None,
    fail: dict[str, int] | None = None,
) -> FakeNvml:
    """Put a FakeNvml under the real bindings for one test; undone when the test ends."""
    fake = FakeNvml(profile, driver_not_loaded=driver_not_loaded, lib_version=lib_version, fail=fail)
    # Fresh module state, so the bindings' own nvmlInit path runs from the start.
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    if library_missing:
        # The bindings try CDLL("libnvidia-ml.so.1") and turn the OSError into LibraryNotFound.
        monkeypatch.setattr(pynvml, "nvmlLib", None)
        monkeypatch.setattr(pynvml, "CDLL", _missing_library)
    else:
        monkeypatch.setattr(pynvml, "nvmlLib", fake)
        monkeypatch.setattr(pynvml, "CDLL", lambda name, *a, **k: fake)
    return fake
