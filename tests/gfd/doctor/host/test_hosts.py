"""gfd doctor end to end on fake hosts: every layer's verdict in one run."""

from __future__ import annotations

from tests.gfd.doctor.host.reports import evidence, layer, statuses


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
    assert "it is the default" in evidence(report, "container toolkit: containerd")
    assert "nvidia.com/gpu devices 0, 1, all" in evidence(report, "container toolkit: CDI")


def test_every_line_says_what_its_layer_is_for(host, nvml, doctor):
    nvml("healthy-pci")
    _, report = doctor(host("healthy-pci"))
    assert {c["layer"] for c in report["checks"]} == set(range(1, 8))
    for c in report["checks"]:
        assert c["purpose"].endswith("?") and len(c["purpose"].split()) <= 10


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
