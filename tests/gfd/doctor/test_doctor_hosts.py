"""gfd doctor end to end on fake hosts: which layer it blames, and what it tells the user."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.backends.errors import BackendError
from gfd.backends.nvml import NvmlBackend


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def layer(report: dict[str, Any], number: int) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if c["layer"] == number]


def test_healthy_pci_host_passes_every_layer(host, nvml, doctor):
    nvml("healthy-pci")
    code, report = doctor(host("healthy-pci"))
    assert code == 0
    assert report["result"] == "PASS"
    s = statuses(report)
    for name in ("hardware", "kernel driver", "NVML", "CUDA", "device nodes", "container toolkit: toolkit"):
        assert s[name] == "PASS", (name, report)
    assert s["container toolkit: containerd"] == "PASS"
    assert s["Kubernetes"] == "SKIP"  # no kubeconfig, no --node
    hw = layer(report, 1)[0]["evidence"]
    assert "2 NVIDIA GPU(s)" in hw and "0000:07:00.0 3D controller [10de:20b0]" in hw
    assert "other NVIDIA functions, not GPUs: 1 bridge (NVSwitch)" in hw
    assert "550.54.15" in layer(report, 2)[0]["evidence"]
    assert "2 GPU(s): NVIDIA A100-SXM4-40GB" in layer(report, 3)[0]["evidence"]
    assert "CUDA up to 12.4" in layer(report, 4)[0]["evidence"]
    assert "/dev/nvidia1 0666" in layer(report, 5)[0]["evidence"]
    assert "it is the default" in statuses_evidence(report, "container toolkit: containerd")
    assert "nvidia.com/gpu devices 0, 1, all" in statuses_evidence(report, "container toolkit: CDI")


def statuses_evidence(report: dict[str, Any], name: str) -> str:
    return next(c["evidence"] for c in report["checks"] if c["name"] == name)


def test_every_line_says_what_its_layer_is_for(host, nvml, doctor):
    nvml("healthy-pci")
    _, report = doctor(host("healthy-pci"))
    assert {c["layer"] for c in report["checks"]} == set(range(1, 8))
    for c in report["checks"]:
        assert c["purpose"].endswith("?") and len(c["purpose"].split()) <= 10


def test_no_driver_fails_at_layer_2_and_skips_the_rest(host, nvml, doctor):
    nvml(None, library_missing=True)
    code, report = doctor(host("no-driver"))
    assert code == 1
    assert report["first_failed_layer"] == 2
    two = layer(report, 2)[0]
    assert two["status"] == "FAIL" and "not loaded" in two["evidence"] and "modprobe nvidia" in two["fix"]
    for n in (3, 4, 5, 6):
        assert [c["status"] for c in layer(report, n)] == ["SKIP"]
        assert layer(report, n)[0]["evidence"] == "fix layer 2 first"


def test_no_driver_with_nouveau_loaded_names_nouveau(host, nvml, doctor):
    nvml(None, library_missing=True)
    root = host("no-driver")
    (root / "sys/module/nouveau").mkdir(parents=True)
    (root / "sys/module/nouveau/initstate").write_text("live\n")
    _, report = doctor(root)
    two = layer(report, 2)[0]
    assert "nouveau" in two["evidence"] and "blacklist" in two["fix"]


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


def test_containerd_without_nvidia_runtime_fails_layer_6(host, nvml, doctor):
    nvml("containerd-no-nvidia")
    code, report = doctor(host("containerd-no-nvidia"))
    assert code == 1
    assert report["first_failed_layer"] == 6
    s = statuses(report)
    assert s["container toolkit: toolkit"] == "PASS"
    assert s["container toolkit: containerd"] == "FAIL"
    c = next(c for c in report["checks"] if c["name"] == "container toolkit: containerd")
    assert "no nvidia runtime configured (default: runc)" in c["evidence"]
    assert "nvidia-ctk runtime configure --runtime=containerd" in c["fix"]
    # the GeForce's HDMI audio function is not a second GPU
    assert "1 NVIDIA GPU(s)" in layer(report, 1)[0]["evidence"]
    assert "other NVIDIA functions, not GPUs: 1 audio" in layer(report, 1)[0]["evidence"]


def test_k3s_host_reads_k3s_containerd_config(host, nvml, doctor):
    nvml("k3s")
    code, report = doctor(host("k3s"))
    assert code == 0
    c = next(c for c in report["checks"] if c["name"] == "container toolkit: k3s containerd")
    assert c["status"] == "PASS"
    assert "/var/lib/rancher/k3s/agent/etc/containerd/config.toml" in c["evidence"]
    assert "runtime nvidia, nvidia-cdi configured, not the default (runc)" in c["evidence"]
    assert "runtimeClassName: nvidia" in c["evidence"]


def test_docker_only_host(host, nvml, doctor):
    nvml("docker-only")
    code, report = doctor(host("docker-only"))
    assert code == 0
    s = statuses(report)
    assert s["container toolkit: docker"] == "PASS"
    assert "/etc/docker/daemon.json: runtime nvidia, and it is the default" in statuses_evidence(
        report, "container toolkit: docker"
    )
    # Docker's own containerd has CRI off: reported, not blamed
    assert s["container toolkit: containerd"] == "PASS"
    assert "CRI plugin disabled" in statuses_evidence(report, "container toolkit: containerd")


def test_jetson_orin_without_nvml(host, nvml, doctor):
    nvml(None, library_missing=True)
    code, report = doctor(host("jetson-orin"), "--cuda", "12.2")
    assert code == 0
    s = statuses(report)
    assert s["hardware"] == "PASS"
    assert "Jetson" in layer(report, 1)[0]["evidence"]
    assert "L4T 36.4.0" in layer(report, 2)[0]["evidence"]
    assert s["NVML"] == "SKIP"  # optional on a Jetson: never a FAIL
    four = layer(report, 4)[0]
    assert four["status"] == "PASS" and "CUDA 12.6" in four["evidence"]
    assert s["device nodes"] == "PASS" and "/dev/nvmap" in layer(report, 5)[0]["evidence"]
    assert s["container toolkit: docker"] == "PASS"


def test_jetson_image_newer_than_jetpack_warns(host, nvml, doctor):
    nvml(None, library_missing=True)
    _, report = doctor(host("jetson-orin"), "--cuda", "13.0")
    four = layer(report, 4)[0]
    assert four["status"] == "WARN" and "CUDA 12.6" in four["evidence"]


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


def test_no_gpu_at_all_fails_layer_1(tmp_path, nvml, doctor):
    nvml(None, library_missing=True)
    (tmp_path / "sys/bus/pci/devices/0000:00:02.0").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices/0000:00:02.0/vendor").write_text("0x8086\n")
    code, report = doctor(tmp_path)
    assert code == 1 and report["first_failed_layer"] == 1
    assert "lspci" in layer(report, 1)[0]["fix"]


def test_runtime_pointing_at_removed_binary_fails(host, nvml, doctor):
    nvml("healthy-pci")
    root = host("healthy-pci")
    conf = root / "etc/containerd/config.toml"
    conf.write_text(conf.read_text().replace("/usr/bin/nvidia", "/usr/local/nvidia/toolkit/nvidia"))
    _, report = doctor(root)
    c = next(c for c in report["checks"] if c["name"] == "container toolkit: containerd")
    assert c["status"] == "FAIL"
    assert "/usr/local/nvidia/toolkit/nvidia-container-runtime, which does not exist" in c["evidence"]


def test_stale_cdi_spec_warns(host, nvml, doctor):
    nvml("healthy-pci")
    root = host("healthy-pci")
    spec = root / "etc/cdi/nvidia.yaml"
    spec.write_text(spec.read_text().replace('name: "1"', 'name: "gpu1"'))
    _, report = doctor(root)
    c = next(c for c in report["checks"] if c["name"] == "container toolkit: CDI")
    assert c["status"] == "WARN" and "lists 1 GPU(s), the host has 2" in c["evidence"]


def _with_driver(root, version: str) -> None:
    text = (root / "proc/driver/nvidia/version").read_text()
    (root / "proc/driver/nvidia/version").write_text(text.replace("550.54.15", version))
    (root / "sys/module/nvidia/version").write_text(version + "\n")


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


PROFILE_470 = {
    "driver_version": "470.82.01",
    "cuda_driver_version": 11040,
    "devices": [{"name": "NVIDIA A100-SXM4-40GB", "pci_bus_id": "00000000:07:00.0"}] * 2,
}
