"""Layer 1 (gfd/doctor/host/hardware.py): is there an NVIDIA GPU at all?"""

from __future__ import annotations

from gfd.doctor.host import hardware
from tests.gfd.doctor.host.reports import host_tree, layer


def test_no_gpu_at_all_fails_layer_1(tmp_path, nvml, doctor):
    nvml(None, library_missing=True)
    (tmp_path / "sys/bus/pci/devices/0000:00:02.0").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices/0000:00:02.0/vendor").write_text("0x8086\n")
    code, report = doctor(tmp_path)
    assert code == 1 and report["first_failed_layer"] == 1
    assert "lspci" in layer(report, 1)[0]["fix"]


def test_audio_functions_are_named_but_not_counted(tmp_path):
    files = {}
    for addr, cls in [
        ("0000:01:00.0", "0x030000"),
        ("0000:01:00.1", "0x040300"),
        ("0000:02:00.0", "0x030200"),
    ]:
        files[f"sys/bus/pci/devices/{addr}/vendor"] = "0x10de\n"
        files[f"sys/bus/pci/devices/{addr}/class"] = cls + "\n"
        files[f"sys/bus/pci/devices/{addr}/device"] = "0x2684\n"
    ctx = host_tree(tmp_path, files)
    (found,) = hardware.check(ctx)
    assert found.evidence.startswith("2 NVIDIA GPU(s) on the PCI bus: 0000:01:00.0 VGA controller")
    assert found.evidence.endswith("other NVIDIA functions, not GPUs: 1 audio")
