"""The MIG symbols of the fake NVML library: MIG mode, MIG devices, GPU and compute instances."""

from __future__ import annotations

import ctypes
from typing import Any

from tests.fakes.nvml_model import (
    CI_ENGINE_PROFILE_COUNT,
    CI_PROFILE_COUNT,
    GI_PROFILE_COUNT,
    FakeGpu,
    FakeMig,
    HandleTable,
)
from tests.fakes.nvml_wire import (
    CI_PROFILE_INFO_V2,
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    GI_PROFILE_INFO_V2,
    SUCCESS,
    as_int,
    has_version,
    put,
    put_handle,
    target_of,
)


class MigSymbols(HandleTable):
    """``c_<symbol>`` implementations for MIG; mixed into FakeNvml."""

    def c_nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        put(current, value=dev.mig_current)
        return put(pending, value=dev.mig_pending)

    def c_nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        return put(out, value=max(7, len(dev.migs)))

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu) or not dev.mig_capable:
            return ERROR_NOT_SUPPORTED
        i = as_int(index)
        if not 0 <= i < len(dev.migs):
            return ERROR_NOT_FOUND
        return put_handle(out, dev.migs[i].handle)

    def c_nvmlDeviceIsMigDeviceHandle(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return ERROR_INVALID_ARGUMENT if dev is None else put(out, value=int(isinstance(dev, FakeMig)))

    def c_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeMig):
            return ERROR_INVALID_ARGUMENT
        return put_handle(out, dev.gpu.handle)

    def c_nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return put(out, value=dev.gi_id) if isinstance(dev, FakeMig) else ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        return put(out, value=dev.ci_id) if isinstance(dev, FakeMig) else ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetAttributes_v2(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeMig):
            return ERROR_NOT_SUPPORTED
        m = dev.spec
        return put(
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
        if versioned and not has_version(out, GI_PROFILE_INFO_V2):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        pid = as_int(profile)
        if not 0 <= pid < GI_PROFILE_COUNT:
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
        return put(out, **fields)

    def c_nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: Any, out: Any) -> int:
        return self._gi_profile(handle, profile, out, versioned=False)

    def c_nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, profile: Any, out: Any) -> int:
        return self._gi_profile(handle, profile, out, versioned=True)

    def c_nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, out: Any) -> int:
        dev = self._device(handle)
        if not isinstance(dev, FakeGpu):
            return ERROR_INVALID_ARGUMENT
        mig = next((m for m in dev.migs if m.gi_id == as_int(gi_id)), None)
        return ERROR_NOT_FOUND if mig is None else put_handle(out, mig.gi_handle)

    def c_nvmlGpuInstanceGetInfo(self, gi: Any, out: Any) -> int:
        mig = self._instance(gi, "gi")
        if mig is None:
            return ERROR_INVALID_ARGUMENT
        info = target_of(out)
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
        return put_handle(out, mig.ci_handle) if as_int(ci_id) == mig.ci_id else ERROR_NOT_FOUND

    def c_nvmlComputeInstanceGetInfo_v2(self, ci: Any, out: Any) -> int:
        mig = self._instance(ci, "ci")
        info = target_of(out)
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
        if versioned and not has_version(out, CI_PROFILE_INFO_V2):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        pid, eid = as_int(profile), as_int(eng)
        if not (0 <= pid < CI_PROFILE_COUNT and 0 <= eid < CI_ENGINE_PROFILE_COUNT):
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
        return put(out, **fields)

    def c_nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: Any, pid: Any, eng: Any, out: Any) -> int:
        return self._ci_profile(gi, pid, eng, out, versioned=False)

    def c_nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gi: Any, pid: Any, eng: Any, out: Any) -> int:
        return self._ci_profile(gi, pid, eng, out, versioned=True)
