"""The NVML backend reads a GPU's and a MIG device's unchanging facts once and keeps them while nothing that
could change them has: proven by changing, between two passes of one backend, each thing that does (our fake
NVML reconfigured under it), and comparing with a fresh backend's probe of the machine as it is now."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gfd.backends.nvml import NvmlBackend
from gfd.inventory import Inventory
from gfd.machine_profile import MachineProfile, load_machine_profile
from tests.fakes.fake_nvml import FakeNvml, install_fake_nvml
from tests.fakes.nvml_faults import LOST

ROOT = Path(__file__).resolve().parents[3]
MP = pytest.MonkeyPatch
ONE_G = {"profile": "1g.5gb", "memory_mib": 4864, "multiprocessors": 14, "gi_slices": 1, "ci_slices": 1}
THREE_G = {"profile": "3g.20gb", "memory_mib": 19968, "multiprocessors": 42, "gi_slices": 3, "ci_slices": 3}
TWO_G = {"profile": "2g.10gb", "memory_mib": 9856, "multiprocessors": 28, "gi_slices": 2, "ci_slices": 2}


def _machine(name: str = "dgx-a100-mig-mixed") -> dict[str, object]:
    return msgspec.to_builtins(load_machine_profile(ROOT / "profiles" / f"{name}.yaml"))  # type: ignore[no-any-return]


def _as(data: dict[str, object]) -> MachineProfile:
    return msgspec.convert(data, MachineProfile)


class Node:
    """One backend, kept from pass to pass, over a fake NVML that the test may replace between passes."""

    def __init__(self, monkeypatch: MP, tmp_path: Path, data: dict[str, object]) -> None:
        self.monkeypatch, self.root = monkeypatch, tmp_path
        self.fake = self.become(data)
        self.backend = NvmlBackend(host_root=tmp_path)

    def become(self, data: dict[str, object]) -> FakeNvml:
        self.fake = install_fake_nvml(self.monkeypatch, _as(data))
        self.fake.write_host_root(self.root)
        return self.fake

    def probe(self) -> Inventory:
        return self.backend.probe()

    def fresh(self, tmp_path: Path) -> Inventory:
        """What a backend that never probed this machine before says of it now."""
        return NvmlBackend(host_root=self.root).probe()


def _gpus(data: dict[str, object]) -> list[dict[str, object]]:
    devices = data["devices"]
    assert isinstance(devices, list)
    return devices


def test_an_unchanged_machine_costs_fewer_calls_after_the_first_pass(monkeypatch: MP, tmp_path: Path) -> None:
    node = Node(monkeypatch, tmp_path, _machine())
    first = node.probe()
    before = node.fake.total_calls
    again = node.probe()
    second = node.fake.total_calls - before
    assert again == first
    assert second < before * 0.6, (before, second)
    assert node.fake.calls["nvmlDeviceGetName"] == len(first.devices)  # read on the first pass only


def test_a_mig_reconfiguration_between_passes_is_seen(monkeypatch: MP, tmp_path: Path) -> None:
    data = _machine()
    node = Node(monkeypatch, tmp_path, data)
    assert {m.profile for m in node.probe().devices[0].mig_devices} == {"1g.5gb"}
    # The same slots, GPU instance ids and (in this fake) MIG UUIDs: only the instances' shape differs.
    gpu = _gpus(data)[0]
    gpu["mig"] = {"enabled": True, "devices": [THREE_G, TWO_G, ONE_G]}
    node.become(data)
    after = node.probe()
    assert [m.profile for m in after.devices[0].mig_devices] == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert after == node.fresh(tmp_path)
    gpu["mig"] = {"enabled": False, "devices": []}  # MIG mode off
    node.become(data)
    off = node.probe()
    assert not off.devices[0].mig_enabled and off.devices[0].mig_devices == ()
    assert off == node.fresh(tmp_path)


def test_another_gpu_in_the_slot_is_read_anew(monkeypatch: MP, tmp_path: Path) -> None:
    data = _machine("h100")
    node = Node(monkeypatch, tmp_path, data)
    node.probe()
    gpu = _gpus(data)[0]
    gpu.update(name="NVIDIA H200", uuid="GPU-00000000-1111-4222-8333-444444444444", compute_capability="9.1")
    node.become(data)
    swapped = node.probe()
    assert (swapped.devices[0].name, swapped.devices[0].compute_capability) == ("NVIDIA H200", (9, 1))
    assert swapped == node.fresh(tmp_path)


def test_a_driver_upgrade_reads_every_gpu_anew(monkeypatch: MP, tmp_path: Path) -> None:
    data = _machine("h100")
    node = Node(monkeypatch, tmp_path, data)
    node.probe()
    data["driver_version"] = "570.86.10"
    fake = node.become(data)
    upgraded = node.probe()
    assert fake.calls["nvmlDeviceGetName"] == len(upgraded.devices)
    assert upgraded == node.fresh(tmp_path)


def test_a_gpu_lost_after_its_facts_were_kept_is_reported(monkeypatch: MP, tmp_path: Path) -> None:
    node = Node(monkeypatch, tmp_path, _machine("h100"))
    healthy = node.probe()
    node.fake.break_gpu(2, LOST)
    sick = node.probe()
    assert sick.health is not None and [f.index for f in sick.health.failures] == [2]
    assert len(sick.devices) == len(healthy.devices) - 1
    node.fake.heal(2)
    assert node.probe() == healthy
