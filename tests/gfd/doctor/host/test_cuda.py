"""Layer 4 (gfd/doctor/host/cuda.py): will an image built with CUDA X.Y run on this driver?"""

from __future__ import annotations

from tests.gfd.doctor.host.reports import layer


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


PROFILE_570 = {
    "driver_version": "570.124.06",
    "cuda_driver_version": 12080,
    "devices": [{"name": "NVIDIA B200", "pci_bus_id": "00000000:07:00.0"}] * 2,
}


def test_cuda_13_5_on_a_driver_too_old_names_the_minimum_driver(host, nvml, doctor):
    nvml({**PROFILE_570})
    root = host("healthy-pci")
    _with_driver(root, "570.124.06")
    code, report = doctor(root, "--cuda", "13.5")
    four = layer(report, 4)[0]
    assert code == 1 and four["status"] == "FAIL"
    assert (
        "a CUDA 13.5 image will not run: it needs driver >= 580.65.06, this host has 570.124.06"
        in (four["evidence"])
    )
    assert "upgrade the driver to >= 580.65.06" in four["fix"] and "reports CUDA >= 13.5" in four["fix"]
    assert "newer than gfd's CUDA table" not in four["evidence"]  # 13.5 is a release the table knows


def test_cuda_13_4_on_a_driver_that_reports_it_runs_with_all_features(host, nvml, doctor):
    nvml({**PROFILE_570, "driver_version": "615.23", "cuda_driver_version": 13040})
    root = host("healthy-pci")
    _with_driver(root, "615.23")
    code, report = doctor(root, "--cuda", "13.4")
    four = layer(report, 4)[0]
    assert code == 0 and four["status"] == "PASS", four


def test_cuda_13_5_on_an_r580_driver_runs_by_minor_version_compatibility(host, nvml, doctor):
    nvml({**PROFILE_570, "driver_version": "580.95.05", "cuda_driver_version": 13000})
    root = host("healthy-pci")
    _with_driver(root, "580.95.05")
    code, report = doctor(root, "--cuda", "13.5")
    four = layer(report, 4)[0]
    assert code == 0 and four["status"] == "WARN"
    assert "minor-version compatibility" in four["evidence"] and "reports CUDA >= 13.5" in four["evidence"]


def test_a_cuda_release_newer_than_the_table_is_named_once(host, nvml, doctor):
    nvml({**PROFILE_570, "driver_version": "615.23", "cuda_driver_version": 13040})
    root = host("healthy-pci")
    _with_driver(root, "615.23")
    _, report = doctor(root, "--cuda", "13.6")
    four = layer(report, 4)[0]
    assert four["status"] == "WARN"
    assert four["evidence"].count("CUDA 13.6 is newer than gfd's CUDA table (known up to CUDA 13.5") == 1
    assert "a newer gpu-labeller may know it" in four["evidence"]


def test_a_driver_reporting_a_cuda_newer_than_the_table_warns_once(host, nvml, doctor):
    nvml({**PROFILE_570, "driver_version": "640.10", "cuda_driver_version": 14000})
    root = host("healthy-pci")
    _with_driver(root, "640.10")
    code, report = doctor(root)
    four = layer(report, 4)[0]
    assert code == 0 and four["status"] == "WARN"
    assert "driver 640.10 supports CUDA up to 14.0 (as the driver reports)" in four["evidence"]
    assert "the CUDA 14.0 it reports is newer than gfd's CUDA table" in four["evidence"]
