"""Layer 6 (gfd/doctor/host/toolkit.py): the container toolkit, the runtimes' configuration, CDI."""

from __future__ import annotations

from tests.gfd.doctor.host.reports import evidence, layer, statuses


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
    assert "/etc/docker/daemon.json: runtime nvidia, and it is the default" in evidence(
        report, "container toolkit: docker"
    )
    # Docker's own containerd has CRI off: reported, not blamed
    assert s["container toolkit: containerd"] == "PASS"
    assert "CRI plugin disabled" in evidence(report, "container toolkit: containerd")


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
