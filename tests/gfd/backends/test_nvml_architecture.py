"""gpu.family from NVML's own architecture answer (nvmlDeviceGetArchitecture), over the real bindings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
import pytest

from gfd.backends.nvml import NvmlBackend
from gfd.inventory import Inventory
from gfd.labels import LabelOptions, build_labels
from gfd.machine_profile import DeviceSpec, MachineProfile
from tests.fakes.fake_nvml import FakeNvml, _Symbol, install_fake_nvml
from tests.fakes.nvml_wire import ERROR_NOT_SUPPORTED, put

MP = pytest.MonkeyPatch


def _node(cc: str) -> MachineProfile:
    gpu = DeviceSpec(
        name="NVIDIA Graphics Device", memory_mib=286524, compute_capability=cc, pci_class="0x030200"
    )
    return MachineProfile(driver_version="615.23", cuda_driver_version=13040, devices=[gpu, gpu])


def _answer_architecture(fake: FakeNvml, answer: int | None) -> None:
    """Export nvmlDeviceGetArchitecture, as drivers from R460 on do: ``answer``, or NotSupported for None."""

    def impl(_handle: Any, out: Any) -> int:
        return ERROR_NOT_SUPPORTED if answer is None else put(out, value=answer)

    fake.nvmlDeviceGetArchitecture = _Symbol(fake, "nvmlDeviceGetArchitecture", impl)  # type: ignore[attr-defined]


def _probe(monkeypatch: MP, tmp_path: Path, profile: MachineProfile, answer: int | str | None) -> Inventory:
    fake = install_fake_nvml(monkeypatch, profile)
    if answer != "absent":
        _answer_architecture(fake, answer)  # type: ignore[arg-type]
    fake.write_host_root(tmp_path)
    return NvmlBackend(host_root=tmp_path).probe()


def test_nvmls_rubin_answer_names_the_family_where_the_table_does_not_know_the_capability(
    monkeypatch: MP, tmp_path: Path
) -> None:
    inv = _probe(monkeypatch, tmp_path, _node("14.0"), pynvml.NVML_DEVICE_ARCH_RUBIN)
    assert [d.architecture for d in inv.devices] == [13, 13]
    got = build_labels(inv, LabelOptions())
    assert got.labels["nvidia.com/gpu.family"] == "rubin"
    assert not [w for w in (*inv.warnings, *got.warnings) if "architecture" in w]


@pytest.mark.parametrize("answer", ["absent", None, pynvml.NVML_DEVICE_ARCH_UNKNOWN])
def test_without_nvmls_answer_the_capability_table_names_rubin_silently(
    monkeypatch: MP, tmp_path: Path, answer: int | str | None
) -> None:
    inv = _probe(monkeypatch, tmp_path, _node("10.7"), answer)
    got = build_labels(inv, LabelOptions())
    assert got.labels["nvidia.com/gpu.family"] == "rubin"
    assert inv.warnings == () and got.warnings == ()


def test_neither_nvml_nor_the_table_knowing_it_is_one_warning(monkeypatch: MP, tmp_path: Path) -> None:
    inv = _probe(monkeypatch, tmp_path, _node("14.0"), "absent")
    got = build_labels(inv, LabelOptions())
    assert got.labels["nvidia.com/gpu.family"] == "undefined"
    assert got.labels["nvidia.com/gpu.count"] == "2"
    (warning,) = got.warnings
    assert "compute capability 14.0" in warning and "newer gpu-labeller" in warning
