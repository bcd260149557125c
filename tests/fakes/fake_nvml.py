"""A fake NVML C library for the unmodified ``pynvml`` bindings (nvidia-ml-py).

``FakeNvml`` stands in for the ``CDLL("libnvidia-ml.so.1")`` object: each NVML
C symbol is an attribute, called by the bindings with the same ctypes arguments
the real library gets (``byref`` out-parameters, string buffers, versioned
structs). It fills those out-parameters and answers NVML return codes, so both
the bindings and our adapter run as they would on a real host. A symbol that
is absent makes the bindings raise ``NVMLError_FunctionNotFound`` themselves.

``install_fake_nvml`` puts it under ``pynvml`` for one test (via monkeypatch):

    fake = install_fake_nvml(monkeypatch, load_machine_profile("profiles/dgx-a100-mig.yaml"))
    inv = NvmlBackend().probe()
    fake.calls["nvmlDeviceGetMemoryInfo"]  # how often the bindings called it

``fail`` maps a symbol to the return code it answers instead, e.g.
``{"nvmlDeviceGetMemoryInfo": NVML_ERROR_NOT_SUPPORTED}``; a key
``"<symbol>:<gpu index>"`` limits that to calls on one GPU (or its MIG
devices); ``NVML_ERROR_FUNCTION_NOT_FOUND`` removes the symbol altogether.
``break_gpu``/``heal`` set and lift a GPU's fault while the library is in use
(``nvml_faults``: lost, unknown error, a failing query, a hang); ``xid`` reports
an Xid event (``nvml_events``).

The benchmarks use it too: the gfd-probe piece (benchmarks/pieces/gfd_probe.py) times the probe and
label pass over this fake and counts its ``calls``, outside any test, through ``fake_nvml_installed``.
So a change to what the fake answers, or to how many calls it counts, moves the figures in
benchmarks/README.md as well. It stays here, beside the tests' other doubles, because the benchmarks
take their whole harness from tests/ (the API servers of tests/kube and tests/apiserver, the peers of
tests/parity).
"""

from __future__ import annotations

import ctypes
import threading
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gfd.machine_profile import DeviceSpec, MachineProfile
from tests.fakes.nvml_events import EventSet, EventSymbols
from tests.fakes.nvml_faults import Faults, GpuFault
from tests.fakes.nvml_mig import MigSymbols
from tests.fakes.nvml_model import CI_IDS, FakeGpu, FakeMig, gi_profile_id
from tests.fakes.nvml_wire import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_DRIVER_NOT_LOADED,
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_INVALID_ARGUMENT,
    ERROR_LIB_RM_VERSION_MISMATCH,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_STRINGS,
    ERROR_UNINITIALIZED,
    FABRIC_INFO_V2,
    FABRIC_INFO_V3,
    FABRIC_STATE_COMPLETED,
    FABRIC_STATE_NOT_SUPPORTED,
    MEMORY_V2,
    MIB,
    SUCCESS,
    as_int,
    has_version,
    nvml_bus_id,
    plain_config_space,
    put,
    put_handle,
    put_str,
    sysfs_bus_id,
    target_of,
    vgpu_config_space,
)

__all__ = ["FakeGpu", "FakeMig", "FakeNvml", "fake_nvml_installed", "install_fake_nvml", "sysfs_bus_id"]


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


class FakeNvml(MigSymbols, EventSymbols):
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
        virtualization_mode: int | None = None,
    ) -> None:
        self.profile = profile or MachineProfile()
        self.virtualization_mode = virtualization_mode  # None: the symbol is absent (an older driver)
        self.faults = Faults()
        self._event_sets: dict[int, EventSet] = {}
        self._events = threading.Condition()
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
        for cls in type(self).__mro__:
            for attr, impl in vars(cls).items():
                name = attr[2:]
                if attr.startswith("c_nvml") and self.fail.get(name) != ERROR_FUNCTION_NOT_FOUND:
                    setattr(self, name, _Symbol(self, name, impl.__get__(self)))
        if virtualization_mode is None and hasattr(self, "nvmlDeviceGetVirtualizationMode"):
            delattr(self, "nvmlDeviceGetVirtualizationMode")

    def break_gpu(self, index: int, fault: GpuFault) -> None:
        """From now on GPU ``index`` answers ``fault`` (``nvml_faults``)."""
        self.faults.set(index, fault)

    def heal(self, index: int) -> None:
        """GPU ``index`` answers again; calls blocked on it go through."""
        self.faults.lift(index)

    # ---- set-up -------------------------------------------------------------------------------

    def _make_gpu(self, index: int, spec: DeviceSpec) -> FakeGpu:
        gpu_uuid = spec.uuid or "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{spec.name}/{index}"))
        gpu = FakeGpu(index=index, spec=spec, uuid=gpu_uuid, bus_id=nvml_bus_id(spec.pci_bus_id, index))
        gpu.handle = self._new_handle(gpu)
        if spec.mig is not None and spec.mig.enabled:
            gpu.mig_current = gpu.mig_pending = 1
            used: dict[tuple[int, str], list[int]] = {}
            for j, m in enumerate(spec.mig.devices):
                mig = FakeMig(
                    gpu=gpu,
                    index=j,
                    spec=m,
                    gi_profile_id=gi_profile_id(m, used),
                    ci_profile_id=CI_IDS.get(m.ci_slices, 0),
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
        index = self._gpu_index(name, args)
        if code is None and index is not None and self._per_gpu_fail:
            code = self.fail.get(f"{name}:{index}")
        if code is None and index is not None:
            code = self.faults.answer(index, name)
        if code is not None:
            return code
        if not name.startswith("nvmlInit") and self.init_count == 0:
            return ERROR_UNINITIALIZED
        return impl(*args)

    def _gpu_index(self, name: str, args: tuple[Any, ...]) -> int | None:
        """The GPU a call is about: its index argument, or the GPU behind its handle."""
        if not args:
            return None
        if name.startswith("nvmlDeviceGetHandleByIndex"):
            return as_int(args[0])
        gpu = self._gpu_of(args[0])
        return gpu.index if gpu is not None else None

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
        return ERROR_STRINGS.get(as_int(code), "Unknown Error").encode()

    def c_nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        if self.profile.driver_version is None:
            return ERROR_NOT_SUPPORTED
        return put_str(buf, length, self.profile.driver_version)

    def c_nvmlSystemGetNVMLVersion(self, buf: Any, length: Any) -> int:
        if self.profile.driver_version is None:
            return ERROR_NOT_SUPPORTED
        major = (self.profile.cuda_driver_version or 12000) // 1000
        return put_str(buf, length, f"{major}.{self.profile.driver_version}")

    def c_nvmlSystemGetCudaDriverVersion(self, out: Any) -> int:
        return self._cuda_version(out)

    def c_nvmlSystemGetCudaDriverVersion_v2(self, out: Any) -> int:
        return self._cuda_version(out)

    def _cuda_version(self, out: Any) -> int:
        if self.profile.cuda_driver_version is None:
            return ERROR_NOT_SUPPORTED
        return put(out, value=self.profile.cuda_driver_version)

    # ---- devices ------------------------------------------------------------------------------

    def c_nvmlDeviceGetCount_v2(self, out: Any) -> int:
        return put(out, value=len(self.gpus))

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        i = as_int(index)
        if not 0 <= i < len(self.gpus):
            return ERROR_INVALID_ARGUMENT
        return put_handle(out, self.gpus[i].handle)

    def c_nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> int:
        raw = getattr(uuid, "value", uuid)  # the bindings pass a c_char_p
        wanted = raw.decode() if isinstance(raw, bytes) else str(raw)
        for gpu in self.gpus:
            if gpu.uuid == wanted:
                return put_handle(out, gpu.handle)
            for mig in gpu.migs:
                if mig.uuid == wanted:
                    return put_handle(out, mig.handle)
        return ERROR_NOT_FOUND

    def c_nvmlDeviceGetName(self, handle: Any, buf: Any, length: Any) -> int:
        dev = self._device(handle)
        if dev is None:
            return ERROR_INVALID_ARGUMENT
        if isinstance(dev, FakeMig):
            return put_str(buf, length, f"{dev.gpu.spec.name} MIG {dev.spec.profile}")
        return put_str(buf, length, dev.spec.name)

    def c_nvmlDeviceGetUUID(self, handle: Any, buf: Any, length: Any) -> int:
        dev = self._device(handle)
        if dev is None:
            return ERROR_INVALID_ARGUMENT
        return put_str(buf, length, dev.uuid)

    def c_nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> int:
        total = self._memory_bytes(handle)
        if total is None:
            return ERROR_NOT_SUPPORTED
        return put(out, total=total, free=total - 2 * MIB, used=2 * MIB)

    def c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, out: Any) -> int:
        if not has_version(out, MEMORY_V2):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        total = self._memory_bytes(handle)
        if total is None:
            return ERROR_NOT_SUPPORTED
        return put(out, total=total, reserved=MIB, free=total - 3 * MIB, used=2 * MIB)

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
        put(major, value=int(ma))
        return put(minor, value=int(mi))

    def c_nvmlDeviceGetPciInfo_v3(self, handle: Any, out: Any) -> int:
        dev = self._device(handle)
        gpu = dev.gpu if isinstance(dev, FakeMig) else dev
        if gpu is None:
            return ERROR_INVALID_ARGUMENT
        domain, bus, rest = gpu.bus_id.split(":")
        device = rest.split(".")[0]
        return put(
            out,
            busIdLegacy=f"{int(domain, 16):04X}:{bus}:{rest}".encode(),
            busId=gpu.bus_id.encode(),
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(device, 16),
            pciDeviceId=0x000010DE,
            pciSubSystemId=0,
        )

    def c_nvmlDeviceGetVirtualizationMode(self, handle: Any, out: Any) -> int:
        gpu = self._gpu_of(handle)
        return ERROR_INVALID_ARGUMENT if gpu is None else put(out, value=self.virtualization_mode or 0)

    def c_nvmlDeviceGetMinorNumber(self, handle: Any, out: Any) -> int:
        gpu = self._gpu_of(handle)
        return ERROR_INVALID_ARGUMENT if gpu is None else put(out, value=gpu.index)

    # ---- fabric (cliques) ---------------------------------------------------------------------

    def _fabric(self, handle: Any, out: Any) -> int:
        gpu = self._gpu_of(handle)
        info = target_of(out)
        if gpu is None or info is None:
            return ERROR_INVALID_ARGUMENT
        cc = gpu.spec.compute_capability
        if gpu.spec.clique is None:
            # Pre-Hopper GPUs have no fabric API; Hopper and later answer "not supported" as a state.
            if cc is None or int(cc.partition(".")[0]) < 9:
                return ERROR_NOT_SUPPORTED
            info.state = FABRIC_STATE_NOT_SUPPORTED
            info.status = SUCCESS
            return SUCCESS
        cluster, _, clique = gpu.spec.clique.rpartition(".")
        raw = uuidlib.UUID(cluster).bytes
        for i, b in enumerate(raw):
            info.clusterUuid[i] = b
        info.cliqueId = int(clique)
        info.state = FABRIC_STATE_COMPLETED
        info.status = SUCCESS
        return SUCCESS

    def c_nvmlDeviceGetGpuFabricInfo(self, handle: Any, out: Any) -> int:
        return self._fabric(handle, out)

    def c_nvmlDeviceGetGpuFabricInfoV(self, handle: Any, out: Any) -> int:
        if not has_version(out, FABRIC_INFO_V2, FABRIC_INFO_V3):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        return self._fabric(handle, out)


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
    virtualization_mode: int | None = None,
) -> FakeNvml:
    """Put a FakeNvml under the real bindings for one test; undone when the test ends."""
    fake = FakeNvml(
        profile,
        driver_not_loaded=driver_not_loaded,
        lib_version=lib_version,
        fail=fail,
        virtualization_mode=virtualization_mode,
    )
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


@contextmanager
def fake_nvml_installed(profile: MachineProfile) -> Iterator[FakeNvml]:
    """``install_fake_nvml`` outside a test (the gfd-probe benchmark): the fake under the real bindings
    for the ``with`` block, the bindings as they were after it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield install_fake_nvml(monkeypatch, profile)
