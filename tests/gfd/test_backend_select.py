"""Which backend ``--backend`` picks, over the fake NVML library and fake Jetson host roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.backends import detect, select_backend
from gfd.backends.errors import BackendError, NoGpuFound
from gfd.backends.mock import MockBackend
from gfd.backends.nvml import NvmlBackend
from gfd.backends.tegra import TegraBackend
from gfd.profile import MachineProfile, load_profile
from tests.fakes.fake_nvml import install_fake_nvml

HERE = Path(__file__).parent
T4 = HERE / "profiles_cli" / "one-t4.yaml"
ORIN = HERE.parent / "fixtures" / "jetson" / "orin-nano-r36"


def test_mock_reads_the_profile_on_every_probe(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(T4.read_text())
    backend = select_backend("mock", mock_profile=profile)
    assert isinstance(backend, MockBackend)
    assert backend.probe().devices[0].name == "Tesla T4"
    profile.write_text(T4.read_text().replace("Tesla T4", "NVIDIA L4"))
    assert backend.probe().devices[0].name == "NVIDIA L4"


def test_a_broken_profile_is_a_profile_layer_error_with_the_field() -> None:
    with pytest.raises(BackendError) as caught:
        MockBackend(HERE / "profiles_cli" / "broken.yaml").probe()
    assert caught.value.layer == "profile"
    assert "devices.0.memory_mib" in str(caught.value)


def test_auto_picks_nvml_when_it_sees_a_gpu_and_probes_only_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install_fake_nvml(monkeypatch, load_profile(T4))
    backend, inventory = detect("auto", host_root=tmp_path)
    assert isinstance(backend, NvmlBackend)
    assert inventory is not None and inventory.backend == "nvml"
    assert [d.name for d in inventory.devices] == ["Tesla T4"]
    assert fake.calls["nvmlDeviceGetCount_v2"] + fake.calls.get("nvmlDeviceGetCount", 0) == 1


def test_auto_on_a_jetson_uses_the_tegra_files_even_when_nvml_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_nvml(monkeypatch, load_profile(T4))
    backend = select_backend("auto", host_root=ORIN)
    assert isinstance(backend, TegraBackend)
    assert backend.probe().backend == "tegra"


def test_auto_with_nvml_and_no_device_is_no_gpu_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install_fake_nvml(monkeypatch, MachineProfile(driver_version="550.54.15", cuda_driver_version=12040))
    with pytest.raises(NoGpuFound):
        select_backend("auto", host_root=tmp_path)


def test_auto_without_the_nvml_library_says_which_layer_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install_fake_nvml(monkeypatch, None, library_missing=True)
    with pytest.raises(BackendError) as caught:
        select_backend("auto", host_root=tmp_path)
    assert caught.value.layer in ("nvml", "container-toolkit")
    assert "libnvidia-ml.so.1" in str(caught.value)


def test_explicit_backends_do_not_probe(tmp_path: Path) -> None:
    assert isinstance(select_backend("nvml", host_root=tmp_path), NvmlBackend)
    assert isinstance(select_backend("tegra", host_root=tmp_path), TegraBackend)
