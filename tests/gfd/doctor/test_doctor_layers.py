"""Single layers on hand-made host trees: the parsing details a user relies on."""

from __future__ import annotations

from pathlib import Path

from gfd.doctor import driver, hardware, nvml
from gfd.doctor.model import Context

OPEN_MODULE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024\nGCC version:  gcc version 12.3.0\n"
)


def _root(tmp_path: Path, files: dict[str, str]) -> Context:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return Context(host_root=tmp_path)


def test_open_module_shown_and_missing_uvm_warns(tmp_path):
    ctx = _root(
        tmp_path,
        {"proc/driver/nvidia/version": OPEN_MODULE, "proc/modules": "nvidia 1 0 - Live 0x0 (POE)\n"},
    )
    found = driver.check(ctx)
    assert found[0].status == "PASS" and "560.35.03 (open kernel module)" in found[0].evidence
    assert found[1].status == "WARN" and "nvidia_uvm" in found[1].evidence
    assert ctx.kernel_version == "560.35.03"


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
    ctx = _root(tmp_path, files)
    (found,) = hardware.check(ctx)
    assert found.evidence.startswith("2 NVIDIA GPU(s) on the PCI bus: 0000:01:00.0 VGA controller")
    assert found.evidence.endswith("other NVIDIA functions, not GPUs: 1 audio")


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


def test_gpu_fallen_off_the_bus_warns(host, nvml, doctor):
    nvml(
        {
            "driver_version": "550.54.15",
            "cuda_driver_version": 12040,
            "devices": [{"name": "NVIDIA A100-SXM4-40GB"}],
        }
    )
    code, report = doctor(host("healthy-pci"))
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


def test_gpu_lost_mid_query_fails_nvml(host, nvml, doctor):
    nvml("healthy-pci", fail={"nvmlDeviceGetName:1": 15})  # NVML_ERROR_GPU_IS_LOST on the second GPU
    code, report = doctor(host("healthy-pci"))
    three = next(c for c in report["checks"] if c["layer"] == 3)
    assert code == 1 and three["status"] == "FAIL"
    assert three["evidence"] == "NVML started but a query failed: GPU is lost"


def test_a_driver_version_nvml_does_not_report_is_no_failure(host, nvml, doctor):
    nvml("healthy-pci", fail={"nvmlSystemGetDriverVersion": 3})  # NVML_ERROR_NOT_SUPPORTED
    code, report = doctor(host("healthy-pci"))
    three = next(c for c in report["checks"] if c["layer"] == 3)
    assert code == 0 and three["status"] == "PASS"
    assert three["evidence"] == "NVML (version not reported) loaded; 2 GPU(s): NVIDIA A100-SXM4-40GB"
