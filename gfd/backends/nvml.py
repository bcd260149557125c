"""The NVML backend: what the NVIDIA driver reports, through the official bindings (nvidia-ml-py).

One probe opens NVML, reads the driver, every GPU and its MIG devices, and always closes it
again. A fact a GPU does not support (NotSupported, or a symbol an older driver lacks) is
left unknown with a warning; only a broken stack fails the probe, with one ``BackendError``
line naming the broken layer. One GPU that cannot be read (lost, an unknown error, a failing
query, no answer within ``gpu_timeout``) is left out and reported in the inventory's ``health``,
with each GPU the PCI bus shows that NVML does not, and each a fatal Xid marked (``watch``); the
labels then come from the GPUs that answer. ``pynvml`` is imported inside ``probe`` so that
choosing another backend never loads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from gfd.backends import decoding
from gfd.backends.bounded import BoundedReads, TimedOut
from gfd.backends.errors import BackendError, NvmlFailed
from gfd.backends.gpu_health import XidMarks, failure_line, reconcile
from gfd.backends.host import PCI_DIR, PciBus, PciGpu
from gfd.backends.nvml_errors import (
    STACK_WIDE,
    TIMEOUT,
    gpu_failure_layer,
    init_error,
    nvml_reason,
    nvml_symbol,
    probe_error,
)
from gfd.backends.nvml_known import GpuKey, KnownFacts, MigKey, StaticGpu, attribute_values
from gfd.inventory import Device, GpuFailure, Health, Inventory, MigDevice

if TYPE_CHECKING:
    from gfd.backends.nvml_events import XidWatch

T = TypeVar("T")

_FABRIC_STATE_COMPLETED = 3
GPU_TIMEOUT_S = 30.0  # one GPU's reads in one pass; the first pass after boot may wake each GPU (seconds)


class _Unsupported(Exception):
    """An optional fact this GPU or driver does not report."""


class NvmlBackend:
    name = "nvml"

    def __init__(
        self,
        with_vgpu: bool = False,
        host_root: Path = Path("/"),
        library: str | None = None,
        gpu_timeout: float = GPU_TIMEOUT_S,
    ) -> None:
        self.with_vgpu = with_vgpu
        self.host_root = Path(host_root)
        self.library = library  # a path to libnvidia-ml.so.1 (below the driver root); None: the loader's
        self.reads = BoundedReads(gpu_timeout)
        self.xid_marks = XidMarks()  # kept across passes: a fatal Xid marks its GPU until it was reset
        self.bus_ids: dict[int, str] = {}  # each GPU's sysfs bus id as earlier passes read it
        self.known = KnownFacts()  # what each GPU and MIG device said that cannot change while it exists
        self.pci_bus = PciBus(self.host_root)
        self._watch: XidWatch | None = None

    def probe(self) -> Inventory:
        pynvml = self._bindings()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise init_error(err.value, self.host_root) from None
        try:
            inventory = _Probe(pynvml, self).run()
        except pynvml.NVMLError as err:  # a required call failed outside any device context
            raise probe_error(err.value, "reading the device list", None) from None
        finally:
            # The probe's own result (or error) matters more than a failed close. A GPU's read still
            # running past its deadline is inside NVML: close once it has ended.
            self.reads.after_all(lambda: _shutdown(pynvml))
        if self._watch is not None:
            self._watch.refresh()  # a GPU that answers again may register now
        return inventory

    def watch(self, wake: Callable[[], None]) -> None:
        """Listen for NVML's fatal Xid events between passes (``nvml_events``), calling ``wake`` on each."""
        from gfd.backends.nvml_events import XidWatch

        if self._watch is None:
            self._watch = XidWatch(self._bindings(), self.xid_marks, wake)
            self._watch.start()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _bindings(self) -> ModuleType:
        import pynvml  # lazy: the tegra and mock backends must not need it

        if self.library is not None and pynvml.nvmlLib is None:
            # The bindings load "libnvidia-ml.so.1" by name unless a library is already in place.
            with contextlib.suppress(OSError):
                pynvml.nvmlLib = pynvml.CDLL(self.library)
        return pynvml


def _shutdown(nvml: ModuleType) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


class _Probe:
    """One pass over NVML; collects warnings for facts left unknown."""

    def __init__(self, nvml: ModuleType, backend: NvmlBackend) -> None:
        self.nvml = nvml
        self.backend = backend
        self.warnings: list[str] = []
        self._gi_profiles: dict[tuple[int, int], Any] = {}
        self._ci_profiles: dict[tuple[int, int, int], Any] = {}
        self._bus_ids: dict[int, str] = {}  # sysfs bus id of each GPU, as soon as it was read
        self._fabric_failed: dict[int, int] = {}  # GPU -> the fabric's error status
        self.driver: str | None = None

    def call(self, what: str, gpu: int | None, fn: Callable[..., T], *args: Any) -> T:
        """A required call: any NVML error fails the probe, named by layer and GPU."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as err:
            raise probe_error(err.value, what, gpu) from None

    def optional(self, what: str, gpu: int | None, fn: Callable[..., T], *args: Any) -> T | None:
        """An optional fact: NotSupported / FunctionNotFound leave it unknown, with a warning."""
        try:
            return self._maybe(what, gpu, fn, *args)
        except _Unsupported:
            where = f"GPU {gpu}: " if gpu is not None else ""
            self.warnings.append(f"{where}{what} not reported by this driver/GPU; left unknown")
            return None

    def _maybe(self, what: str, gpu: int | None, fn: Callable[..., T], *args: Any) -> T:
        n = self.nvml
        try:
            return fn(*args)
        except (n.NVMLError_NotSupported, n.NVMLError_FunctionNotFound):
            raise _Unsupported(what) from None
        except n.NVMLError as err:
            raise probe_error(err.value, what, gpu) from None

    def run(self) -> Inventory:
        n = self.nvml
        driver = self.driver = self.optional("driver version", None, n.nvmlSystemGetDriverVersion)
        cuda = self.optional("CUDA driver version", None, n.nvmlSystemGetCudaDriverVersion)
        count = self.call("device count", None, n.nvmlDeviceGetCount)
        devices: list[Device] = []
        failures: list[GpuFailure] = []
        reads = self.backend.reads.run_all([(i, functools.partial(self.device, i)) for i in range(count)])
        for i, outcome in enumerate(reads):
            read = self._judged(i, outcome)
            if isinstance(read, GpuFailure):
                failures.append(read)
            else:
                devices.append(read)
        self.backend.known.forget_unseen()
        devices, failures = self._unfabricated(devices, failures)
        self.backend.bus_ids.update(self._bus_ids)
        health = reconcile([self._bus_ids.get(d.index) for d in devices], failures, self._bus())
        devices, health = self._xid_marked(devices, health)
        self.warnings.extend(failure_line(f) for f in health.failures)
        return Inventory(
            backend="nvml",
            driver_version=driver,
            cuda_driver_version=cuda,
            devices=tuple(devices),
            health=health,
            warnings=tuple(self.warnings),
        )

    def _judged(self, i: int, outcome: Device | BaseException) -> Device | GpuFailure:
        """GPU ``i``'s facts, or why it cannot be used. A failure of the whole stack still fails the pass."""
        if isinstance(outcome, Device):
            return outcome
        if isinstance(outcome, TimedOut):
            # The same words every pass while it lasts, so that it is said once.
            waited = f"no answer within {self.backend.reads.timeout:g} s"
            return GpuFailure(self._address(i), i, nvml_symbol(TIMEOUT), "hardware", None, waited)
        if isinstance(outcome, NvmlFailed) and outcome.code not in STACK_WIDE and outcome.gpu is not None:
            layer = gpu_failure_layer(outcome.code)
            return GpuFailure(
                self._address(i), i, nvml_symbol(outcome.code), layer, outcome.what, nvml_reason(outcome.code)
            )
        raise outcome

    def _address(self, i: int) -> str | None:
        """GPU ``i``'s bus id: read now, else as an earlier pass read it (a lost GPU no longer says)."""
        return self._bus_ids.get(i) or self.backend.bus_ids.get(i)

    def _unfabricated(
        self, devices: list[Device], failures: list[GpuFailure]
    ) -> tuple[list[Device], list[GpuFailure]]:
        """Move the GPUs whose fabric registration failed (no CUDA work runs on them) to the failures."""
        for i, status in self._fabric_failed.items():
            what = f"fabric registration {nvml_symbol(status)}"
            failures.append(GpuFailure(self._address(i), i, what, "fabric", None, nvml_reason(status)))
        return [d for d in devices if d.index not in self._fabric_failed], failures

    def _xid_marked(self, devices: list[Device], health: Health) -> tuple[list[Device], Health]:
        """Move the answering GPUs a fatal Xid marked since their last reset to the failures; tell the marks
        which GPUs answer and which do not (a reset shows as both, one pass after the other)."""
        answering = [(d.index, self._bus_ids[d.index]) for d in devices if d.index in self._bus_ids]
        failing = [f.pci_bus_id for f in health.failures if f.pci_bus_id]
        marked = {f.index: f for f in self.backend.xid_marks.settle(answering, failing)}
        if not marked:
            return devices, health
        found = sorted([*health.failures, *marked.values()], key=lambda f: (f.index is None, f.index or 0))
        return [d for d in devices if d.index not in marked], replace(health, failures=tuple(found))

    def _bus(self) -> list[PciGpu] | None:
        """The NVIDIA GPUs on the PCI bus below the host root; None where sysfs is not there to read."""
        if not (self.backend.host_root / PCI_DIR).is_dir():
            return None
        gpus, _ = self.backend.pci_bus.scan()
        return gpus

    def device(self, i: int) -> Device:
        """GPU ``i``: its static facts from an earlier pass while its bus id and UUID (and the driver) are
        the same, the rest read now. Memory, MIG mode and devices and the fabric are read every pass; the
        memory query also tells, every pass, whether the GPU still answers its queries."""
        n = self.nvml
        h = self.call("device handle", i, n.nvmlDeviceGetHandleByIndex, i)
        # The bus id first: should a later read fail, the failure still names the GPU's address.
        pci = self.optional("PCI info", i, n.nvmlDeviceGetPciInfo, h)
        bus_id = _text(pci.busId) if pci is not None else None
        if bus_id is not None and (sysfs_name := decoding.sysfs_bus_id(bus_id)) is not None:
            self._bus_ids[i] = sysfs_name
        uuid = self.optional("UUID", i, n.nvmlDeviceGetUUID, h)
        key = GpuKey(self.driver, bus_id, uuid)
        static = self.backend.known.gpu(key)
        if static is None:
            static = self.backend.known.remember_gpu(key, self._static(i, h, bus_id))
        else:
            self.warnings.extend(static.warnings)  # as reading them again would have said
        memory = self.optional("memory size", i, n.nvmlDeviceGetMemoryInfo, h)
        total_bytes = int(memory.total) if memory is not None else None
        mig_capable, mig_enabled, migs = self.mig(i, h, total_bytes, key)
        return Device(
            index=i,
            name=static.name,
            uuid=uuid,
            memory_mib=total_bytes // decoding.MIB if total_bytes is not None else None,
            compute_capability=static.compute_capability,
            architecture=static.architecture,
            pci_class=static.pci_class,
            pci_bus_id=bus_id,
            mig_capable=mig_capable,
            mig_enabled=mig_enabled,
            mig_devices=migs,
            clique=self.clique(i, h),
            vgpu=static.vgpu,
            vgpu_guest=static.vgpu_guest,
            minor=static.minor,
        )

    def _static(self, i: int, h: Any, bus_id: str | None) -> StaticGpu:
        """What GPU ``i`` says that does not change while it keeps its bus id and UUID under one driver,
        with the warnings reading it gave (said again each pass, as if read again)."""
        n = self.nvml
        said = len(self.warnings)
        name = self.call("device name", i, n.nvmlDeviceGetName, h)
        cc = self.optional("compute capability", i, n.nvmlDeviceGetCudaComputeCapability, h)
        sysfs_dir = self._sysfs_dir(bus_id)
        return StaticGpu(
            name=name,
            compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
            pci_class=self._pci_class(i, sysfs_dir),
            vgpu=self._vgpu(i, sysfs_dir) if self.backend.with_vgpu else None,
            vgpu_guest=self._vgpu_guest(i, h),
            minor=self._minor(h),
            architecture=self._architecture(h),
            warnings=tuple(self.warnings[said:]),
        )

    # ---- MIG ----------------------------------------------------------------------------------

    def mig(
        self, i: int, h: Any, total_bytes: int | None, gpu: GpuKey
    ) -> tuple[bool, bool, tuple[MigDevice, ...]]:
        n = self.nvml
        try:
            current, pending = self._maybe("MIG mode", i, n.nvmlDeviceGetMigMode, h)
        except _Unsupported:
            return False, False, ()  # NotSupported here means: this GPU cannot do MIG
        enabled = current == n.NVML_DEVICE_MIG_ENABLE
        if pending != current:
            self.warnings.append(f"GPU {i}: MIG mode change pending; reset the GPU or reboot to apply it")
        if not enabled:
            return True, False, ()
        slots = self.call("MIG device count", i, n.nvmlDeviceGetMaxMigDeviceCount, h)
        migs = []
        for j in range(slots):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except n.NVMLError_NotFound:
                continue  # an empty slot: fewer MIG devices than the GPU could hold
            except n.NVMLError as err:
                raise probe_error(err.value, f"MIG device {j}", i) from None
            migs.append(self.mig_device(i, h, m, total_bytes, gpu))
        return True, True, tuple(migs)

    def mig_device(self, i: int, parent: Any, m: Any, total_bytes: int | None, gpu: GpuKey) -> MigDevice:
        """A MIG device's facts: from an earlier pass while the device, its GPU and compute instance and
        its attributes are the same (a MIG reconfiguration makes new ones), else read now."""
        n = self.nvml
        what = "MIG device"
        gi_id = self.call(what, i, n.nvmlDeviceGetGpuInstanceId, m)
        ci_id = self.call(what, i, n.nvmlDeviceGetComputeInstanceId, m)
        attrs = self.call(what + " attributes", i, n.nvmlDeviceGetAttributes, m)
        key = MigKey(
            gpu,
            self.optional(what + " UUID", i, n.nvmlDeviceGetUUID, m),
            int(gi_id),
            int(ci_id),
            attribute_values(attrs),
        )
        if (known := self.backend.known.mig(key)) is not None:
            return known
        gi = self.call(what, i, n.nvmlDeviceGetGpuInstanceById, parent, gi_id)
        gi_info = self.call(what, i, n.nvmlGpuInstanceGetInfo, gi)
        ci = self.call(what, i, n.nvmlGpuInstanceGetComputeInstanceById, gi, ci_id)
        ci_info = self.call(what, i, n.nvmlComputeInstanceGetInfo, ci)
        profile = self._profile_name(
            i, parent, gi, int(gi_info.profileId), int(ci_info.profileId), total_bytes, attrs
        )
        return self.backend.known.remember_mig(
            key,
            MigDevice(
                profile=profile,
                memory_mib=int(attrs.memorySizeMB),
                multiprocessors=int(attrs.multiprocessorCount),
                gi_slices=int(attrs.gpuInstanceSliceCount),
                ci_slices=int(attrs.computeInstanceSliceCount),
                copy_engines=int(attrs.sharedCopyEngineCount),
                decoders=int(attrs.sharedDecoderCount),
                encoders=int(attrs.sharedEncoderCount),
                jpegs=int(attrs.sharedJpegCount),
                ofas=int(attrs.sharedOfaCount),
            ),
        )

    def _profile_name(
        self, i: int, parent: Any, gi: Any, gi_pid: int, ci_pid: int, total_bytes: int | None, attrs: Any
    ) -> str:
        # As NVIDIA's tooling does: find the GPU and compute instance profiles whose ids match
        # the instance's, then name the profile from those ids and the memory share.
        gi_index, gi_prof = self._find_gi_profile(i, parent, gi_pid)
        ci_index = self._find_ci_profile(i, gi, gi_index, ci_pid)
        if total_bytes is not None and gi_index is not None and ci_index is not None:
            try:
                return decoding.mig_profile_name(gi_index, ci_index, total_bytes, int(attrs.memorySizeMB))
            except ValueError:
                pass  # an id newer than our table: fall back to the name NVML gives
        named = decoding.profile_name_from_nvml(_text(getattr(gi_prof, "name", b""))) if gi_prof else None
        if named is None:
            raise BackendError(
                "nvml", f"GPU {i}: cannot tell the profile of a MIG device (profile id {gi_pid})"
            )
        return named

    def _find_gi_profile(self, i: int, parent: Any, gi_pid: int) -> tuple[int | None, Any]:
        # The profile at index gi_pid nearly always has id gi_pid; try it before scanning all.
        for p in [gi_pid, *range(decoding.GI_PROFILE_COUNT)]:
            info = self._gi_profile(i, parent, p)
            if info is not None and int(info.id) == gi_pid:
                return p, info
        return None, None

    def _gi_profile(self, i: int, parent: Any, p: int) -> Any:
        key = (i, p)
        if key not in self._gi_profiles:
            self._gi_profiles[key] = self._profile_info(
                i, self.nvml.nvmlDeviceGetGpuInstanceProfileInfo, parent, p
            )
        return self._gi_profiles[key]

    def _find_ci_profile(self, i: int, gi: Any, gi_index: int | None, ci_pid: int) -> int | None:
        fn = self.nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo
        for p in [ci_pid, *range(decoding.CI_PROFILE_COUNT)]:
            for e in range(decoding.CI_ENGINE_PROFILE_COUNT):
                key = (i, -1 if gi_index is None else gi_index, p)
                if key not in self._ci_profiles:
                    self._ci_profiles[key] = self._profile_info(i, fn, gi, p, e)
                info = self._ci_profiles[key]
                if info is not None and int(info.id) == ci_pid:
                    return p
        return None

    def _profile_info(self, i: int, fn: Callable[..., Any], *args: Any) -> Any:
        n = self.nvml
        for version in (2, 1):  # the versioned call first; drivers before R470 only have v1
            try:
                return fn(*args, version=version)
            except n.NVMLError_FunctionNotFound:
                continue
            except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
                return None
            except n.NVMLError as err:
                raise probe_error(err.value, "MIG profile info", i) from None
        return None

    # ---- fabric, sysfs ------------------------------------------------------------------------

    def clique(self, i: int, h: Any) -> str | None:
        n = self.nvml
        # The versioned call first; drivers before R550 only have the unversioned one.
        for struct_name, fn_name in (
            ("c_nvmlGpuFabricInfoV_t", "nvmlDeviceGetGpuFabricInfoV"),
            ("c_nvmlGpuFabricInfo_t", "nvmlDeviceGetGpuFabricInfo"),
        ):
            struct, fn = getattr(n, struct_name, None), getattr(n, fn_name, None)
            if struct is None or fn is None:
                continue  # older bindings
            info = struct()
            try:
                fn(h, ctypes.byref(info))
            except n.NVMLError_FunctionNotFound:
                continue
            except n.NVMLError_NotSupported:
                return None  # no NVLink fabric (pre-Hopper, or no NVSwitch): no clique, no warning
            except n.NVMLError as err:
                raise probe_error(err.value, "GPU fabric info", i) from None
            if int(info.state) != _FABRIC_STATE_COMPLETED:
                return None  # fabric not (yet) registered: a clique label now would be wrong
            if int(info.status) != 0:
                self._fabric_failed[i] = int(info.status)  # registered, and failed: CUDA will not run here
                return None
            return decoding.clique_id(bytes(info.clusterUuid), int(info.cliqueId))
        return None

    def _sysfs_dir(self, bus_id: str | None) -> Path | None:
        name = decoding.sysfs_bus_id(bus_id) if bus_id else None
        return self.backend.host_root / PCI_DIR / name if name else None

    def _pci_class(self, i: int, sysfs_dir: Path | None) -> int | None:
        if sysfs_dir is None:
            return None
        try:
            return decoding.parse_hex((sysfs_dir / "class").read_text())
        except OSError:
            self.warnings.append(f"GPU {i}: cannot read {sysfs_dir / 'class'}; gpu.mode unknown")
            return None

    def _minor(self, h: Any) -> int | None:
        # No label needs it (gfd doctor checks the device file by it), so no failure and no warning.
        with contextlib.suppress(self.nvml.NVMLError):
            return int(self.nvml.nvmlDeviceGetMinorNumber(h))
        return None

    def _architecture(self, h: Any) -> int | None:
        # Only gpu.family reads it, and the compute capability stands in where the driver has no answer
        # (before R460, or a GPU newer than it): no failure and no warning.
        with contextlib.suppress(self.nvml.NVMLError):
            return int(self.nvml.nvmlDeviceGetArchitecture(h))
        return None

    def _vgpu_guest(self, i: int, h: Any) -> bool | None:
        # Unprivileged, unlike the PCI config space: enough to say whether this is a vGPU guest.
        n = self.nvml
        try:
            mode = self._maybe("virtualization mode", i, n.nvmlDeviceGetVirtualizationMode, h)
        except _Unsupported:
            return None
        return int(mode) == n.NVML_GPU_VIRTUALIZATION_MODE_VGPU

    def _vgpu(self, i: int, sysfs_dir: Path | None) -> Any:
        if sysfs_dir is None:
            return None
        path = sysfs_dir / "config"
        try:
            with open(path, "rb") as f:
                return decoding.vgpu_info(f.read(4096))
        except (OSError, decoding.ConfigSpaceTooShort) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            self.warnings.append(
                f"GPU {i}: vGPU detection skipped, cannot read {path} ({reason}); "
                "reading PCI config space needs a privileged container"
            )
            return None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
