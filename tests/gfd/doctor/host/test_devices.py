"""Layer 5 (gfd/doctor/host/devices.py): the /dev files CUDA programs open."""

from __future__ import annotations

from tests.gfd.doctor.host.reports import layer


def test_missing_uvm_device_fails_layer_5(host, nvml, doctor):
    nvml("healthy-pci")
    root = host("healthy-pci")
    (root / "dev/nvidia-uvm").unlink()
    (root / "dev/nvidia1").unlink()
    code, report = doctor(root)
    five = layer(report, 5)[0]
    assert code == 1 and five["status"] == "FAIL"
    assert five["evidence"] == "missing: /dev/nvidia-uvm, /dev/nvidia1"
    assert "nvidia-modprobe" in five["fix"]


def test_closed_device_modes_warn(host, nvml, doctor):
    nvml("healthy-pci")
    root = host("healthy-pci")
    (root / "dev/nvidia0").chmod(0o660)
    code, report = doctor(root)
    five = layer(report, 5)[0]
    assert code == 0 and five["status"] == "WARN"
    assert "/dev/nvidia0 0660" in five["evidence"]
