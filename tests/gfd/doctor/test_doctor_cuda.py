"""Layer 4 (gfd/doctor/cuda.py): will an image built with CUDA X.Y run on this driver?"""

from __future__ import annotations

from tests.gfd.doctor.reports import layer


def test_jetson_image_newer_than_jetpack_warns(host, nvml, doctor):
    nvml(None, library_missing=True)
    _, report = doctor(host("jetson-orin"), "--cuda", "13.0")
    four = layer(report, 4)[0]
    assert four["status"] == "WARN" and "CUDA 12.6" in four["evidence"]


def _with_driver(root, version: str) -> None:
    text = (root / "proc/driver/nvidia/version").read_text()
    (root / "proc/driver/nvidia/version").write_text(text.replace("550.54.15", version))
    (root / "sys/module/nvidia/version").write_text(version + "\n")


PROFILE_470 = {
    "driver_version": "470.82.01",
    "cuda_driver_version": 11040,
    "devices": [{"name": "NVIDIA A100-SXM4-40GB", "pci_bus_id": "00000000:07:00.0"}] * 2,
}


def test_image_too_new_for_the_driver_fails_layer_4_with_the_way_out(host, nvml, doctor):
    nvml({**PROFILE_470})
    root = host("healthy-pci")
    _with_driver(root, "470.82.01")
    code, report = doctor(root, "--cuda", "12.4")
    four = layer(report, 4)[0]
    assert code == 1 and report["first_failed_layer"] == 4
    assert (
        "a CUDA 12.4 image will not run: it needs driver >= 525.60.13, this host has 470.82.01"
        in four["evidence"]
    )
    assert "highest CUDA here: 11.4" in four["evidence"]
    assert ">= 550.54.14" in four["fix"] and "cuda-compat-12-4" in four["fix"]


def test_image_within_the_driver_runs(host, nvml, doctor):
    nvml("healthy-pci")
    code, report = doctor(host("healthy-pci"), "--cuda", "12.2")
    four = layer(report, 4)[0]
    assert code == 0 and four["status"] == "PASS"
    assert four["evidence"].startswith("a CUDA 12.2 image runs here with all features")


def test_image_by_minor_version_compatibility_warns(host, nvml, doctor):
    nvml("healthy-pci")
    code, report = doctor(host("healthy-pci"), "--cuda", "12.8")
    four = layer(report, 4)[0]
    assert code == 0 and four["status"] == "WARN"
    assert "minor-version compatibility" in four["evidence"] and ">= 570.26" in four["evidence"]
