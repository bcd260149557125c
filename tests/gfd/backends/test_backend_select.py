"""Which backend ``--backend`` picks, over the fake NVML library and fake Jetson host roots, and where the
NVML backend finds libnvidia-ml.so.1 below a driver root."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from gfd.backends import BackendChoice, detect, nvml_library
from gfd.backends.errors import BackendError
from gfd.backends.mock import MockBackend
from gfd.backends.nvml import NvmlBackend
from gfd.backends.tegra import TegraBackend
from gfd.config import load_settings
from gfd.doctor.host.context import Context
from gfd.doctor.host.hardware import check
from gfd.machine_profile import MachineProfile, MachineProfileError, load_machine_profile
from tests.fakes.fake_nvml import install_fake_nvml

GFD_TESTS = Path(__file__).parents[1]
T4 = GFD_TESTS / "profiles_cli" / "one-t4.yaml"
ORIN = GFD_TESTS.parent / "fixtures" / "jetson" / "orin-nano-r36"


def test_mock_reads_the_profile_on_every_probe(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(T4.read_text())
    backend, inventory = detect("mock", mock_profile=profile)
    assert inventory is None
    assert isinstance(backend, MockBackend)
    assert backend.probe().devices[0].name == "Tesla T4"
    profile.write_text(T4.read_text().replace("Tesla T4", "NVIDIA L4"))
    assert backend.probe().devices[0].name == "NVIDIA L4"


def test_a_broken_profile_is_a_profile_layer_error_with_the_field() -> None:
    with pytest.raises(BackendError) as caught:
        MockBackend(GFD_TESTS / "profiles_cli" / "broken.yaml").probe()
    assert caught.value.layer == "profile"
    assert "devices.0.memory_mib" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "devices: [{name: x, memory_mib: '5'}]\n",
            "field devices.0.memory_mib: Expected `int | null`, got `str`",
        ),
        (
            "devices: [{name: x, compute_capability: '8'}]\n",
            "field devices.0.compute_capability: expected MAJOR",
        ),
        ("devices: [{name: x, pci_class: display}]\n", "field devices.0.pci_class: expected a hex PCI class"),
        ("devices: [{name: x, bogus: 1}]\n", "field devices.0: Object contains unknown field `bogus`"),
        ("devices: [{memory_mib: 5}]\n", "field devices.0.name: a required field is missing"),
        (
            "devices: [{name: x, mig: {enabled: yes, devices: [{profile: 1g.5gb}]}}]\n",
            "devices.0.mig.devices.0.",
        ),
        ("cuda_driver_version: 12\n", "field cuda_driver_version: Expected `int` >= 1000"),
        ("- a list\n", "expected a mapping at the top level, got list"),
    ],
)
def test_each_mistake_in_a_profile_names_its_file_and_field(tmp_path: Path, text: str, says: str) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    with pytest.raises(MachineProfileError) as caught:
        load_machine_profile(profile)
    assert str(caught.value).startswith(f"{profile}: "), caught.value
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_auto_picks_nvml_when_it_sees_a_gpu_and_probes_only_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install_fake_nvml(monkeypatch, load_machine_profile(T4))
    backend, inventory = detect("auto", host_root=tmp_path)
    assert isinstance(backend, NvmlBackend)
    assert inventory is not None and inventory.backend == "nvml"
    assert [d.name for d in inventory.devices] == ["Tesla T4"]
    assert fake.calls["nvmlDeviceGetCount_v2"] + fake.calls.get("nvmlDeviceGetCount", 0) == 1


def test_auto_on_a_jetson_uses_the_tegra_files_even_when_nvml_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_nvml(monkeypatch, load_machine_profile(T4))
    backend, inventory = detect("auto", host_root=ORIN)
    assert isinstance(backend, TegraBackend) and inventory is None
    assert backend.probe().backend == "tegra"


def test_auto_with_nvml_and_no_device_is_a_node_without_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As NVIDIA's GFD: NVML works, there is just nothing to label (and that is no failure).
    install_fake_nvml(monkeypatch, MachineProfile(driver_version="550.54.15", cuda_driver_version=12040))
    backend, inventory = detect("auto", host_root=tmp_path)
    assert isinstance(backend, NvmlBackend)
    assert inventory is not None and inventory.devices == ()


def pci_device(root: Path, address: str, vendor: int, pci_class: int) -> None:
    device = root / "sys/bus/pci/devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"0x{vendor:04x}\n")
    (device / "class").write_text(f"0x{pci_class:06x}\n")
    (device / "device").write_text("0x1234\n")


@pytest.mark.parametrize("name", ["auto", "nvml"])
def test_no_nvidia_gpu_on_the_pci_bus_is_said_as_the_doctor_says_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: BackendChoice
) -> None:
    from gfd.daemon import Daemon

    pci_device(tmp_path, "0000:00:02.0", 0x8086, 0x030000)  # an Intel VGA controller, nothing else
    install_fake_nvml(monkeypatch, None, library_missing=True)
    settings = load_settings(["--backend", name, "--host-root", str(tmp_path), "--oneshot", "-o", "-"], {})
    result = Daemon(settings).run_pass()
    (doctor,) = check(Context(host_root=tmp_path))  # what `gfd doctor` reports for the same machine
    assert doctor.status == "FAIL"
    assert result.layer == "hardware"
    assert result.error == f"hardware: {doctor.evidence}: {doctor.fix}"
    assert "no NVIDIA (vendor 0x10de) GPU under /sys/bus/pci/devices" in result.error
    assert "runtimeClassName" not in result.error


def test_with_an_nvidia_gpu_on_the_bus_nvmls_own_reason_stands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pci_device(tmp_path, "0000:3b:00.0", 0x10DE, 0x030200)
    install_fake_nvml(monkeypatch, None, library_missing=True)
    with pytest.raises(BackendError) as caught:
        detect("auto", host_root=tmp_path)
    assert caught.value.layer in ("nvml", "container-toolkit")
    assert "libnvidia-ml.so.1" in str(caught.value)


@pytest.mark.parametrize("libdir", ["usr/lib64", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"])
def test_nvml_is_loaded_from_below_the_driver_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, libdir: str
) -> None:
    driver_root = tmp_path / "driver-root"
    real = driver_root / libdir / "libnvidia-ml.so.550.54.15"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"")
    (real.parent / "libnvidia-ml.so.1").symlink_to(real.name)
    fake = install_fake_nvml(monkeypatch, load_machine_profile(T4))
    loaded: list[str] = []

    def cdll(name: str, *args: object, **kwargs: object) -> object:
        loaded.append(name)
        return fake

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", cdll)
    _, inventory = detect("auto", host_root=tmp_path, driver_root=driver_root)
    assert loaded == [str(real)]
    assert inventory is not None and [d.name for d in inventory.devices] == ["Tesla T4"]


def test_without_a_library_below_the_driver_root_the_loader_searches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install_fake_nvml(monkeypatch, load_machine_profile(T4))
    loaded: list[str] = []
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", lambda name, *a, **k: loaded.append(name) or fake)
    detect("auto", host_root=tmp_path, driver_root=tmp_path / "driver-root")
    assert loaded == ["libnvidia-ml.so.1"]


def test_auto_without_the_nvml_library_says_which_layer_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install_fake_nvml(monkeypatch, None, library_missing=True)
    with pytest.raises(BackendError) as caught:
        detect("auto", host_root=tmp_path)
    assert caught.value.layer in ("nvml", "container-toolkit")
    assert "libnvidia-ml.so.1" in str(caught.value)


def test_explicit_backends_do_not_probe(tmp_path: Path) -> None:
    nvml, probed = detect("nvml", host_root=tmp_path)
    assert isinstance(nvml, NvmlBackend) and probed is None
    tegra, probed = detect("tegra", host_root=tmp_path)
    assert isinstance(tegra, TegraBackend) and probed is None


def library(root: Path, rel: str) -> Path:
    path = root / rel / "libnvidia-ml.so.550.54.15"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    (root / rel / "libnvidia-ml.so.1").symlink_to(path.name)
    return path


def test_the_library_below_a_driver_root_in_the_device_plugins_order(tmp_path: Path) -> None:
    library(tmp_path, "usr/lib/x86_64-linux-gnu")
    first = library(tmp_path, "usr/lib64")
    assert nvml_library(tmp_path) == str(first)  # its links resolved, as the loader would


def test_jetpack_6s_library_is_found_too(tmp_path: Path) -> None:
    found = library(tmp_path, "usr/lib/aarch64-linux-gnu/nvidia")
    assert nvml_library(tmp_path) == str(found)


def test_no_driver_root_or_no_library_leaves_it_to_the_loader(tmp_path: Path) -> None:
    assert nvml_library(None) is None
    assert nvml_library(Path("/")) is None
    assert nvml_library(tmp_path) is None
