"""The NVML backend over the mock NVML C library built from NVIDIA's go-nvml mock machines.

Real dlopen, real C structs, real pynvml: what the backend reports must be what the machine is, as the
mock's own description of it (go-nvml's data) says. The fake in tests/fakes stays for error injection.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import pynvml
import pytest

from gfd.backends.errors import BackendError
from gfd.backends.nvml import NvmlBackend
from gfd.inventory import Inventory
from gfd.labels import LabelOptions, build_labels
from tests.parity import peers

MP = pytest.MonkeyPatch

# MIG layouts as the mock takes them: GPU instance profile ids per MIG GPU, and which GPUs.
LAYOUTS = {
    "off": ("", ""),
    "1g-twice": ("0,0", ""),
    "2g-and-1g-on-gpu1": ("1,0", "1"),
    "on-empty": ("enabled", ""),
}


def _probe(
    monkeypatch: MP, machine: str, mig: str = "", mig_gpus: str = "", **more: str
) -> tuple[Inventory, Any]:
    """Probe the mock machine through the backend; ``more``: further MOCK_NVML_* settings."""
    peers.require()
    env = peers.mock_env(machine, mig, mig_gpus) | {f"MOCK_NVML_{k.upper()}": v for k, v in more.items()}
    for key in [k for k in os.environ if k.startswith("MOCK_NVML_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("MOCK_NVML_"):
            monkeypatch.setenv(key, value)
    # The bindings load "libnvidia-ml.so.1" once per process; point them at the mock, with fresh state.
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(peers.MOCK_LIBRARY)))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    return NvmlBackend().probe(), peers.describe(env)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("machine", peers.machines() or ["(not built)"])
def test_inventory_is_the_mock_machine(monkeypatch: MP, machine: str, layout: str) -> None:
    inv, want = _probe(monkeypatch, machine, *LAYOUTS[layout])
    assert inv.backend == "nvml" and not inv.simulated
    assert inv.driver_version == want["driver_version"]
    assert inv.cuda_driver_version == want["cuda_driver_version"]
    assert len(inv.devices) == len(want["devices"])
    for got, exp in zip(inv.devices, want["devices"], strict=True):
        assert got.index == exp["index"]
        assert got.name == exp["name"]
        assert got.uuid == exp["uuid"]
        assert got.memory_mib == exp["memory_mib"]
        assert got.compute_capability == tuple(exp["compute_capability"])
        assert got.pci_bus_id == exp["pci_bus_id"]
        assert (got.mig_capable, got.mig_enabled) == (exp["mig_capable"], exp["mig_enabled"])
        assert got.vgpu_guest is False  # the mock is bare metal
        # The description names each MIG device's facts as MigDevice does (and adds its UUID).
        facts = [{k: v for k, v in m.items() if k != "uuid"} for m in exp["migs"]]
        assert len(got.mig_devices) == len(facts)
        assert [{k: getattr(m, k) for k in f} for m, f in zip(got.mig_devices, facts, strict=True)] == facts


def test_mig_profiles_are_named_from_slices_and_memory(monkeypatch: MP) -> None:
    inv, want = _probe(monkeypatch, "dgxa100", "1,0")
    for got, exp in zip(inv.devices, want["devices"], strict=True):
        names = [m.profile for m in got.mig_devices]
        gib = [-(-m["memory_mib"] // 1024) for m in exp["migs"]]
        assert names == [f"{m['gi_slices']}g.{g}gb" for m, g in zip(exp["migs"], gib, strict=True)]


def test_the_probe_closes_nvml_so_the_next_sees_a_new_machine(monkeypatch: MP) -> None:
    first, _ = _probe(monkeypatch, "dgxh100")
    second, want = _probe(monkeypatch, "a30")
    assert {d.name for d in first.devices} != {d.name for d in second.devices}
    assert [d.name for d in second.devices] == [d["name"] for d in want["devices"]]


def test_an_unknown_machine_fails_init_with_one_line(monkeypatch: MP) -> None:
    with pytest.raises(BackendError, match="Unknown Error") as err:
        _probe(monkeypatch, "no-such-machine")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("mode", "present"),
    [("none", "false"), ("passthrough", "false"), ("host-vgpu", "false"), ("vgpu", "true")],
)
def test_vgpu_present_follows_the_virtualization_mode(monkeypatch: MP, mode: str, present: str) -> None:
    """No privilege needed: NVML's virtualization mode says whether the GPUs are vGPU guests."""
    inv, want = _probe(monkeypatch, "dgxh100", virtualization_mode=mode)
    assert want["virtualization_mode"] == {"none": 0, "passthrough": 1, "vgpu": 2, "host-vgpu": 3}[mode]
    assert {d.vgpu_guest for d in inv.devices} == {present == "true"}
    labels = build_labels(inv, LabelOptions()).labels
    assert labels["nvidia.com/vgpu.present"] == present
    assert not any(k.startswith("nvidia.com/vgpu.host-driver") for k in labels)


def test_a_gpu_made_to_fail_in_the_mock_is_left_out_until_it_answers(monkeypatch: MP, tmp_path: Any) -> None:
    """The mock's fault lines (in its events file) make a GPU fail under a real C library, as on the node."""
    events = tmp_path / "events"
    events.write_text("2 lost\n")
    inv, _ = _probe(monkeypatch, "dgxh100", events=str(events))
    assert [d.index for d in inv.devices] == [0, 1, 3, 4, 5, 6, 7]
    assert inv.health is not None
    assert [(f.index, f.error, f.layer) for f in inv.health.failures] == [
        (2, "NVML_ERROR_GPU_IS_LOST", "hardware")
    ]
    labels = build_labels(inv, LabelOptions()).labels
    assert (labels["nvidia.com/gpu.health"], labels["nvidia.com/gpu.count"]) == ("degraded", "7")
    with open(events, "a") as f:
        f.write("2 answers\n")
    healed, _ = _probe(monkeypatch, "dgxh100", events=str(events))
    assert len(healed.devices) == 8 and healed.health is not None and healed.health.failures == ()
