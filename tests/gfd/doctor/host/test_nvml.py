"""Layer 3 (gfd/doctor/host/nvml.py): NVML, read through the NVML backend, against the kernel module."""

from __future__ import annotations

import sys

import pytest

from gfd.backends.errors import BackendError
from gfd.backends.nvml import NvmlBackend
from gfd.doctor.host import nvml
from gfd.labels import LabelOptions, build_labels
from tests.gfd.doctor.host.reports import layer


def test_version_mismatch_shows_both_versions(host, nvml, doctor):
    nvml("version-mismatch", lib_version="550.54.15")
    code, report = doctor(host("version-mismatch"))
    assert code == 1
    assert report["first_failed_layer"] == 3
    three = layer(report, 3)[0]
    assert three["evidence"] == (
        "driver/library version mismatch (NVML library 550.54.15, kernel module 535.104.05)"
    )
    assert "reboot" in three["fix"]
    assert layer(report, 4)[0]["evidence"] == "fix layer 3 first"


def test_nvml_start_failure_is_said_as_gfd_logs_it(host, nvml, doctor):
    nvml("healthy-pci", driver_not_loaded=True)
    root = host("healthy-pci")
    code, report = doctor(root)
    three = layer(report, 3)[0]
    with pytest.raises(BackendError) as logged:
        NvmlBackend(host_root=root).probe()
    assert code == 1 and three["status"] == "FAIL"
    assert str(logged.value) == f"driver: {three['evidence']}: {three['fix']}"
    assert "modprobe nvidia" in three["fix"]


def test_library_missing_on_pci_host_fails_nvml(host, nvml, doctor):
    nvml(None, library_missing=True)
    _, report = doctor(host("healthy-pci"))
    three = layer(report, 3)[0]
    assert three["status"] == "FAIL" and "libnvidia-ml.so.1" in three["evidence"]
    assert "runtimeClassName: nvidia" in three["fix"]


def test_library_version_read_from_its_file_name(tmp_path):
    for rel in (
        "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15",
        "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert nvml.library_versions(tmp_path) == ["550.54.15"]


def test_jetpack6_nvml_is_accepted_on_a_jetson(host, nvml, doctor):
    nvml({"driver_version": "540.4.0", "cuda_driver_version": 12060, "devices": [{"name": "Orin (nvgpu)"}]})
    code, report = doctor(host("jetson-orin"))
    three = next(c for c in report["checks"] if c["layer"] == 3)
    assert code == 0
    assert three["status"] == "PASS" and three["evidence"] == "NVML 540.4.0 loaded; 1 GPU(s): Orin (nvgpu)"


def test_a_gpu_on_the_bus_that_nvml_does_not_report_is_named(host, nvml, doctor):
    nvml(
        {
            "driver_version": "550.54.15",
            "cuda_driver_version": 12040,
            "devices": [{"name": "NVIDIA A100-SXM4-40GB", "pci_bus_id": "00000000:07:00.0"}],
        }
    )
    code, report = doctor(host("healthy-pci"))
    missing = next(c for c in report["checks"] if c["name"] == "NVML: GPU 0000:0f:00.0")
    assert code == 0 and missing["status"] == "WARN"
    # No driver link in this tree: the driver did not take the GPU.
    assert missing["evidence"] == "GPU 0000:0f:00.0 cannot be used: not reported by NVML; layer: driver"
    assert "dmesg" in missing["fix"]
    assert not [c for c in report["checks"] if c["name"] == "NVML: count"]  # the GPU is named instead


def test_a_gpu_nvml_sees_more_than_the_bus_shows_is_only_counted(host, nvml, doctor):
    """GPUs given to VMs (vfio-pci) are display GPUs on the bus that NVML never reports."""
    nvml(
        {
            "driver_version": "550.54.15",
            "devices": [{"name": "NVIDIA A100-SXM4-40GB", "pci_bus_id": "00000000:07:00.0"}],
        }
    )
    root = host("healthy-pci")
    (root / "sys/bus/pci/devices/0000:0f:00.0/driver").symlink_to("../../../bus/pci/drivers/vfio-pci")
    code, report = doctor(root)
    count = next(c for c in report["checks"] if c["name"] == "NVML: count")
    assert code == 0 and count["status"] == "WARN"
    assert "NVML sees 1 of the 2 GPUs on the PCI bus" in count["evidence"]


def test_unloadable_host_library_falls_back_to_the_plain_failure(host, nvml, doctor):
    nvml(None, library_missing=True)
    root = host("healthy-pci")
    (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").write_text("not an ELF file")
    code, report = doctor(root)
    three = next(c for c in report["checks"] if c["layer"] == 3)
    assert code == 1 and "libnvidia-ml.so.1" in three["evidence"] and three["status"] == "FAIL"


def test_a_gpu_lost_mid_query_is_named_with_its_error_and_layer(host, nvml, doctor):
    nvml("healthy-pci", fail={"nvmlDeviceGetName:1": 15})  # NVML_ERROR_GPU_IS_LOST on the second GPU
    code, report = doctor(host("healthy-pci"))
    three = {c["name"]: c for c in report["checks"] if c["layer"] == 3}
    assert code == 0 and three["NVML"]["status"] == "PASS"  # the other GPU works
    assert "1 GPU(s): NVIDIA A100-SXM4-40GB" in three["NVML"]["evidence"]
    lost = three["NVML: GPU 0000:0f:00.0"]
    assert lost["status"] == "WARN"
    assert lost["evidence"] == (
        "GPU 1 (0000:0f:00.0) cannot be used: NVML_ERROR_GPU_IS_LOST (GPU is lost) reading device name; "
        "layer: hardware"
    )
    assert "Xid 79" in lost["fix"] and "reset the GPU" in lost["fix"]


def test_every_gpu_lost_fails_nvml_naming_each(host, nvml, doctor):
    nvml("healthy-pci", fail={"nvmlDeviceGetName": 15})
    code, report = doctor(host("healthy-pci"))
    three = layer(report, 3)[0]
    assert code == 1 and three["status"] == "FAIL"
    assert "none of its GPUs can be used" in three["evidence"]
    assert "GPU 0 (0000:07:00.0)" in three["evidence"] and "GPU 1 (0000:0f:00.0)" in three["evidence"]


def test_eight_gpus_on_the_bus_and_seven_in_nvml_names_the_missing_one(host, nvml, doctor):
    nvml("dgx-a100-one-gpu-missing")
    code, report = doctor(host("dgx-a100-one-gpu-missing"))
    three = {c["name"]: c for c in report["checks"] if c["layer"] == 3}
    assert "8 NVIDIA GPU(s) on the PCI bus" in layer(report, 1)[0]["evidence"]
    assert "7 GPU(s)" in three["NVML"]["evidence"]
    (missing,) = [c for name, c in three.items() if name.startswith("NVML: GPU")]
    assert missing["name"] == "NVML: GPU 0000:b7:00.0" and missing["status"] == "WARN"
    # Bound to the nvidia driver and not in NVML's list: the GPU itself (fell off the bus).
    assert missing["evidence"] == "GPU 0000:b7:00.0 cannot be used: not reported by NVML; layer: hardware"
    assert code == 0 and report["result"] == "PASS"  # a degraded node still runs work on the seven


def test_eight_gpus_on_the_bus_and_seven_in_nvml_is_labelled_degraded(host, nvml):
    nvml("dgx-a100-one-gpu-missing")
    inv = NvmlBackend(host_root=host("dgx-a100-one-gpu-missing")).probe()
    labels = build_labels(inv, LabelOptions()).labels
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu.health")} == {
        "nvidia.com/gpu.health": "degraded",
        "nvidia.com/gpu.health.answering": "7",
        "nvidia.com/gpu.health.failing": "1",
        "nvidia.com/gpu.health.on-bus": "8",
    }
    assert labels["nvidia.com/gpu.count"] == "7"


def test_a_driver_version_nvml_does_not_report_is_no_failure(host, nvml, doctor):
    nvml("healthy-pci", fail={"nvmlSystemGetDriverVersion": 3})  # NVML_ERROR_NOT_SUPPORTED
    code, report = doctor(host("healthy-pci"))
    three = next(c for c in report["checks"] if c["layer"] == 3)
    assert code == 0 and three["status"] == "PASS"
    assert three["evidence"] == "NVML (version not reported) loaded; 2 GPU(s): NVIDIA A100-SXM4-40GB"


def test_missing_bindings_are_named(host, doctor, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails as without the package
    code, report = doctor(host("healthy-pci"))
    three = layer(report, 3)[0]
    assert code == 1 and three["evidence"] == "the nvidia-ml-py package is missing"
