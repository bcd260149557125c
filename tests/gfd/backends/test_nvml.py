"""The NVML backend over the real pynvml bindings and a fake C library configured from a profile."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from gfd.backends import nvml_errors
from gfd.backends.errors import BackendError, NvmlFailed
from gfd.backends.nvml import NvmlBackend
from gfd.inventory import Device, Inventory, cuda_version_parts
from gfd.labels import LabelOptions, build_labels, health
from gfd.machine_profile import MachineProfile, load_machine_profile
from tests.fakes.fake_nvml import FakeNvml, install_fake_nvml

ROOT = Path(__file__).resolve().parents[3]
HEALTH_KEYS = [health.HEALTH, health.ANSWERING, health.FAILING, health.ON_BUS]
OWN = Path(__file__).parents[1] / "profiles_nvml"
MP = pytest.MonkeyPatch


def _profiles() -> list[Path]:
    shipped = sorted((ROOT / "profiles").glob("*.yaml"))
    return [p for p in shipped + sorted(OWN.glob("*.yaml")) if load_machine_profile(p).jetson is None]


def _profile(name: str) -> MachineProfile:
    for path in _profiles():
        if path.stem == name:
            return load_machine_profile(path)
    return load_machine_profile(OWN / f"{name}.yaml")


def _probe(monkeypatch: MP, tmp_path: Path, profile: MachineProfile, **kw: object) -> Inventory:
    fake = install_fake_nvml(monkeypatch, profile, **kw)  # type: ignore[arg-type]
    fake.write_host_root(tmp_path)
    return NvmlBackend(with_vgpu=True, host_root=tmp_path).probe()


def _expected(profile: MachineProfile, device: Device, probed: Device) -> Device:
    # A profile may leave the bus id out (the fake invents one); NVML spells it with 8 domain digits.
    bus = probed.pci_bus_id if device.pci_bus_id is None else device.pci_bus_id
    uuid = probed.uuid if device.uuid is None else device.uuid
    # Profiles say nothing of device files; the fake numbers them by index (checked on its own below).
    return Device(**{**device.__dict__, "pci_bus_id": bus, "uuid": uuid, "minor": probed.minor})


@pytest.mark.parametrize("path", _profiles(), ids=lambda p: p.stem)
def test_probe_reports_what_the_machine_has(monkeypatch: MP, tmp_path: Path, path: Path) -> None:
    profile = load_machine_profile(path)
    inv = _probe(monkeypatch, tmp_path, profile)
    want = profile.to_inventory()
    assert inv.backend == "nvml" and not inv.simulated
    assert (inv.driver_version, inv.cuda_driver_version) == (want.driver_version, want.cuda_driver_version)
    assert len(inv.devices) == len(want.devices)
    for got, exp in zip(inv.devices, want.devices, strict=True):
        assert got == _expected(profile, exp, got)


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
@pytest.mark.parametrize("path", _profiles(), ids=lambda p: p.stem)
def test_labels_match_the_simulated_node(monkeypatch: MP, tmp_path: Path, path: Path, strategy: str) -> None:
    """Probing a machine through NVML labels it as the mock backend labels its profile, minus "simulated"."""
    profile = load_machine_profile(path)
    inv = dataclasses.replace(_probe(monkeypatch, tmp_path, profile), machine=profile.machine)
    opts = LabelOptions(mig_strategy=strategy, with_vgpu=True)  # type: ignore[arg-type]
    mock = build_labels(profile.to_inventory(), opts).labels
    assert mock.pop("nvidia.com/gpu.simulated") == "true"
    nvml = build_labels(inv, opts).labels
    # Only NVML can tell the GPUs' health; every GPU of the machine answers, as the PCI bus shows.
    gpus = str(len(profile.devices))
    assert {k: nvml.pop(k) for k in HEALTH_KEYS} == dict(
        zip(HEALTH_KEYS, ["ok", gpus, "0", gpus], strict=True)
    )
    assert nvml == mock


def test_the_probe_always_closes_nvml(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("dgx-a100-mig"))
    NvmlBackend(host_root=tmp_path).probe()
    assert fake.calls["nvmlInitWithFlags"] == fake.calls["nvmlShutdown"] == 1
    assert fake.init_count == 0


def test_mig_profile_names_follow_nvidia(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("h100-mig-clique"))
    names = [[m.profile for m in d.mig_devices] for d in inv.devices]
    assert names == [["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb"], ["3g.40gb", "1c.3g.40gb"]]


def test_mig_capable_but_off_is_capable_and_not_enabled(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("h100"))
    assert all(d.mig_capable and not d.mig_enabled and d.mig_devices == () for d in inv.devices)


def test_mig_not_supported_means_not_capable(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("t4-cloud"))
    assert not inv.devices[0].mig_capable and inv.warnings == ()


def test_pending_mig_change_is_a_warning(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("h100"))
    fake.gpus[2].mig_pending = 1
    inv = NvmlBackend(host_root=fake.write_host_root(tmp_path)).probe()
    assert not inv.devices[2].mig_enabled
    assert any("GPU 2: MIG mode change pending" in w for w in inv.warnings)


def test_clique_is_cluster_uuid_dot_clique_id(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("h100-mig-clique"))
    assert {d.clique for d in inv.devices} == {"7f3e5c1a-2b4d-4e6f-8a9b-0c1d2e3f4a5b.32766"}


def test_clique_needs_a_completed_fabric(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("h100-mig-clique"))
    real = FakeNvml._fabric

    def in_progress(self: FakeNvml, handle: object, out: object) -> int:
        code = real(self, handle, out)
        out._obj.state = 2  # type: ignore[attr-defined]  # NVML_GPU_FABRIC_STATE_IN_PROGRESS
        return code

    monkeypatch.setattr(FakeNvml, "_fabric", in_progress)
    inv = NvmlBackend(host_root=fake.write_host_root(tmp_path)).probe()
    assert [d.clique for d in inv.devices] == [None, None]


def test_fabric_falls_back_to_the_unversioned_call(monkeypatch: MP, tmp_path: Path) -> None:
    fail = {"nvmlDeviceGetGpuFabricInfoV": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    inv = _probe(monkeypatch, tmp_path, _profile("h100-mig-clique"), fail=fail)
    assert inv.devices[0].clique == "7f3e5c1a-2b4d-4e6f-8a9b-0c1d2e3f4a5b.32766"


def test_a_driver_without_any_fabric_call_just_has_no_clique(monkeypatch: MP, tmp_path: Path) -> None:
    absent = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    fail = {"nvmlDeviceGetGpuFabricInfoV": absent, "nvmlDeviceGetGpuFabricInfo": absent}
    inv = _probe(monkeypatch, tmp_path, _profile("h100-mig-clique"), fail=fail)
    assert [d.clique for d in inv.devices] == [None, None]
    assert len(inv.devices[0].mig_devices) == 4


def test_old_driver_without_versioned_profile_info(monkeypatch: MP, tmp_path: Path) -> None:
    absent = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    fail = {
        "nvmlDeviceGetGpuInstanceProfileInfoV": absent,
        "nvmlGpuInstanceGetComputeInstanceProfileInfoV": absent,
    }
    inv = _probe(monkeypatch, tmp_path, _profile("dgx-a100-mig"), fail=fail)
    assert {m.profile for d in inv.devices for m in d.mig_devices} == {"1g.5gb"}


@pytest.mark.parametrize(
    ("symbol", "field"),
    [
        ("nvmlDeviceGetMemoryInfo", "memory_mib"),
        ("nvmlDeviceGetCudaComputeCapability", "compute_capability"),
        ("nvmlDeviceGetUUID", "uuid"),
        ("nvmlDeviceGetPciInfo_v3", "pci_class"),
    ],
)
@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_an_unsupported_field_is_left_unknown(
    monkeypatch: MP, tmp_path: Path, symbol: str, field: str, code: int
) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("t4-cloud"), fail={symbol: code})
    dev = inv.devices[0]
    assert getattr(dev, field) is None
    assert dev.name == "Tesla T4" and inv.driver_version == "535.183.01"
    assert len(inv.warnings) == 1 and inv.warnings[0].startswith("GPU 0: ")


def test_device_file_minor_numbers(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("dgx-a100-mig"))
    assert [d.minor for d in inv.devices] == list(range(len(inv.devices)))


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_GPU_IS_LOST])
def test_a_minor_number_nvml_refuses_is_unknown_without_a_warning(
    monkeypatch: MP, tmp_path: Path, code: int
) -> None:
    # no label needs it: nothing the daemon does may depend on it
    inv = _probe(monkeypatch, tmp_path, _profile("t4-cloud"), fail={"nvmlDeviceGetMinorNumber": code})
    assert inv.devices[0].minor is None and inv.warnings == ()


def test_jetson_nvml_without_memory(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _profile("orin-nvgpu"))
    assert inv.devices[0].name == "Orin (nvgpu)" and inv.devices[0].memory_mib is None
    assert inv.devices[0].compute_capability == (8, 7)


def test_unreadable_pci_class_leaves_mode_unknown(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("rtx4090-gaming-pc"))
    inv = NvmlBackend(host_root=tmp_path).probe()  # no sysfs laid out under this host root
    assert inv.devices[0].pci_class is None
    assert any("gpu.mode unknown" in w for w in inv.warnings)
    assert fake.init_count == 0


def test_pci_class_is_read_from_the_sysfs_name_of_the_bus_id(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("t4-cloud"))
    fake.write_host_root(tmp_path)
    # NVML says "00000000:00:1E.0"; sysfs names that device "0000:00:1e.0".
    assert (tmp_path / "sys/bus/pci/devices/0000:00:1e.0/class").read_text() == "0x030200\n"
    (tmp_path / "sys/bus/pci/devices/0000:00:1e.0/class").write_text("0x030000\n")
    assert NvmlBackend(host_root=tmp_path).probe().devices[0].pci_class == 0x030000


def test_vgpu_only_when_asked(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("vgpu-a10"))
    fake.write_host_root(tmp_path)
    assert NvmlBackend(host_root=tmp_path).probe().devices[0].vgpu is None
    vgpu = NvmlBackend(with_vgpu=True, host_root=tmp_path).probe().devices[0].vgpu
    assert vgpu is not None
    assert (vgpu.host_driver_version, vgpu.host_driver_branch) == ("550.54.16", "r550_40")


def test_vgpu_unprivileged_read_is_skipped_with_a_warning(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("vgpu-a10"))
    fake.write_host_root(tmp_path)
    config = tmp_path / "sys/bus/pci/devices/0000:02:00.0/config"
    config.write_bytes(config.read_bytes()[:64])  # what an unprivileged reader gets
    inv = NvmlBackend(with_vgpu=True, host_root=tmp_path).probe()
    assert inv.devices[0].vgpu is None
    assert any("vGPU detection skipped" in w and "privileged" in w for w in inv.warnings)


# ---- errors a user must understand --------------------------------------------------------------


def _one_line(err: BackendError) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_library_missing_in_a_container(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("t4-cloud"), library_missing=True)
    fake.write_host_root(tmp_path)  # the host's kernel module is loaded, the library not mounted
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()  # the bindings' own loading path fails, not a faked exception
    with pytest.raises(BackendError) as caught:
        NvmlBackend(host_root=tmp_path).probe()
    text = _one_line(caught.value)
    assert caught.value.layer == "container-toolkit"
    assert "535.183.01" in text and "runtimeClassName: nvidia" in text and "NVIDIA_VISIBLE_DEVICES" in text


def test_library_missing_on_a_host_without_driver(monkeypatch: MP, tmp_path: Path) -> None:
    install_fake_nvml(monkeypatch, None, library_missing=True)
    monkeypatch.setattr(nvml_errors, "_in_container", lambda: False)
    with pytest.raises(BackendError) as caught:
        NvmlBackend(host_root=tmp_path).probe()
    assert caught.value.layer == "nvml"
    assert "install the NVIDIA driver" in _one_line(caught.value)


def test_driver_not_loaded(monkeypatch: MP, tmp_path: Path) -> None:
    install_fake_nvml(monkeypatch, _profile("t4-cloud"), driver_not_loaded=True)
    with pytest.raises(BackendError) as caught:
        NvmlBackend(host_root=tmp_path).probe()
    assert caught.value.layer == "driver"
    assert "kernel module is not loaded" in _one_line(caught.value)
    assert isinstance(caught.value, NvmlFailed)
    assert (caught.value.code, caught.value.at_init) == (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, True)


def test_version_mismatch_names_both_versions(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, _profile("t4-cloud"), lib_version="550.54.15")
    fake.write_host_root(tmp_path)  # the old kernel module, 535.183.01, is still loaded
    maps = tmp_path / "maps"
    maps.write_text(
        f"7f00-7f10 r-xp 0 08:01 42 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{fake.lib_version}\n"
    )
    monkeypatch.setattr(nvml_errors, "SELF_MAPS", maps)
    with pytest.raises(BackendError) as caught:
        NvmlBackend(host_root=tmp_path).probe()
    text = _one_line(caught.value)
    assert caught.value.layer == "driver"
    assert "version mismatch" in text and "550.54.15" in text and "535.183.01" in text and "reboot" in text


def test_gpu_lost_mid_probe_is_left_out_and_the_pass_goes_on(monkeypatch: MP, tmp_path: Path) -> None:
    fail = {"nvmlDeviceGetMemoryInfo:3": pynvml.NVML_ERROR_GPU_IS_LOST}
    fake = install_fake_nvml(monkeypatch, _profile("dgx-a100-mig"), fail=fail)
    fake.write_host_root(tmp_path)
    inv = NvmlBackend(host_root=tmp_path).probe()
    assert [d.index for d in inv.devices] == [0, 1, 2, 4, 5, 6, 7]
    assert inv.health is not None
    (lost,) = inv.health.failures
    assert (lost.index, lost.pci_bus_id, lost.error, lost.layer) == (
        3,
        "0000:37:00.0",
        "NVML_ERROR_GPU_IS_LOST",
        "hardware",
    )
    assert lost.doing == "memory size"
    assert fake.init_count == 0  # closed even so


def test_gpu_lost_while_reading_mig_devices(monkeypatch: MP, tmp_path: Path) -> None:
    fail = {"nvmlDeviceGetAttributes_v2:1": pynvml.NVML_ERROR_GPU_IS_LOST}
    install_fake_nvml(monkeypatch, _profile("dgx-a100-mig"), fail=fail)
    inv = NvmlBackend(host_root=tmp_path).probe()
    assert inv.health is not None
    assert [(f.index, f.error, f.doing) for f in inv.health.failures] == [
        (1, "NVML_ERROR_GPU_IS_LOST", "MIG device attributes")
    ]
    assert len(inv.devices) == 7


@pytest.mark.parametrize(
    ("fail", "layer", "words"),
    [
        ({"nvmlInitWithFlags": pynvml.NVML_ERROR_NO_PERMISSION}, "container-toolkit", "device nodes"),
        ({"nvmlDeviceGetCount_v2": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}, "driver", "device count"),
        # A whole-stack code on one GPU is still the stack's: the pass fails, naming it.
        ({"nvmlDeviceGetName:1": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}, "driver", "device name on GPU 1"),
        (
            {"nvmlDeviceGetHandleByIndex_v2": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH},
            "driver",
            "device handle on GPU 0",
        ),
    ],
)
def test_other_failures_name_their_layer(
    monkeypatch: MP, tmp_path: Path, fail: dict[str, int], layer: str, words: str
) -> None:
    install_fake_nvml(monkeypatch, _profile("h100"), fail=fail)
    with pytest.raises(BackendError) as caught:
        NvmlBackend(host_root=tmp_path).probe()
    assert caught.value.layer == layer
    assert words in _one_line(caught.value)


def test_zero_devices_is_an_empty_inventory(monkeypatch: MP, tmp_path: Path) -> None:
    install_fake_nvml(monkeypatch, None)
    inv = NvmlBackend(host_root=tmp_path).probe()
    assert inv.devices == () and inv.backend == "nvml"


# ---- the wire shapes the adapter relies on ------------------------------------------------------


def test_binding_return_shapes(monkeypatch: MP) -> None:
    install_fake_nvml(monkeypatch, _profile("dgx-a100-mig"))
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]  # [current, pending], a list
        assert pynvml.nvmlDeviceGetCudaComputeCapability(h) == (8, 0)  # a tuple
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        assert not hasattr(v1, "reserved") and v1.total == 40960 * 1024 * 1024
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)  # v2 only when asked for
        assert v2.version == pynvml.nvmlMemory_v2 and v2.total == v1.total
        assert cuda_version_parts(pynvml.nvmlSystemGetCudaDriverVersion()) == (12, 4)
        assert pynvml.nvmlDeviceGetPciInfo(h).busId == "00000000:07:00.0"  # decoded by the bindings
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 7)
    finally:
        pynvml.nvmlShutdown()


def test_handles_by_uuid_and_mig_handles(monkeypatch: MP) -> None:
    install_fake_nvml(monkeypatch, _profile("dgx-a100-mig"))
    pynvml.nvmlInit()
    try:
        gpu = pynvml.nvmlDeviceGetHandleByUUID(b"GPU-3f6a2b1c-9d8e-4f70-a1b2-c3d4e5f6a7b1")
        assert pynvml.nvmlDeviceGetPciInfo(gpu).busId == "00000000:17:00.0"
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(mig)
        assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert pynvml.nvmlDeviceGetUUID(parent) == "GPU-3f6a2b1c-9d8e-4f70-a1b2-c3d4e5f6a7b1"
    finally:
        pynvml.nvmlShutdown()


def test_a_missing_symbol_is_function_not_found(monkeypatch: MP) -> None:
    absent = {"nvmlDeviceGetGpuFabricInfoV": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    install_fake_nvml(monkeypatch, _profile("h100"), fail=absent)
    pynvml.nvmlInit()
    try:
        info = pynvml.c_nvmlGpuFabricInfoV_t()
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.byref(info))
    finally:
        pynvml.nvmlShutdown()


def test_importing_the_backend_does_not_load_pynvml() -> None:
    code = "import sys, gfd.backends.nvml; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
