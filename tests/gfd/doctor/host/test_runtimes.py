"""Container runtime configs are parsed, not grepped: each format's nvidia entry and default."""

from __future__ import annotations

from pathlib import Path

from gfd.doctor.host.runtimes import read_all, read_engine


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_containerd_v1_format(tmp_path):
    write(
        tmp_path,
        "etc/containerd/config.toml",
        '[plugins.cri.containerd]\n  default_runtime_name = "nvidia"\n'
        '[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
        "[plugins.cri.containerd.runtimes.nvidia.options]\n"
        'BinaryName = "/usr/bin/nvidia-container-runtime"\n',
    )
    c = read_engine(tmp_path, "containerd", "etc/containerd/config.toml")
    assert c is not None and c.nvidia == ("nvidia",) and c.nvidia_is_default


def test_containerd_drop_in_from_imports(tmp_path):
    # nvidia-ctk can write its runtime into a drop-in that the main config imports
    write(
        tmp_path, "etc/containerd/config.toml", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    )
    write(
        tmp_path,
        "etc/containerd/conf.d/99-nvidia.toml",
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvidia-container-runtime"\n',
    )
    c = read_engine(tmp_path, "containerd", "etc/containerd/config.toml")
    assert c is not None and c.nvidia == ("nvidia",) and c.default == "runc"


def test_runtime_found_by_binary_not_only_by_name(tmp_path):
    write(
        tmp_path,
        "etc/containerd/config.toml",
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "gpu"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu.options]\n'
        'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n',
    )
    c = read_engine(tmp_path, "containerd", "etc/containerd/config.toml")
    assert c is not None and c.nvidia == ("gpu",) and c.nvidia_is_default
    assert c.binaries == ("/usr/local/nvidia/toolkit/nvidia-container-runtime",)


def test_a_commented_out_runtime_does_not_count(tmp_path):
    # grep would find "nvidia" here; the parser does not
    write(
        tmp_path,
        "etc/containerd/config.toml",
        'version = 2\n# [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '#   BinaryName = "/usr/bin/nvidia-container-runtime"\n',
    )
    c = read_engine(tmp_path, "containerd", "etc/containerd/config.toml")
    assert c is not None and c.nvidia == ()


def test_broken_toml_and_json_are_reported_with_the_file(tmp_path):
    write(tmp_path, "etc/containerd/config.toml", "version = 2\n[plugins\n")
    write(tmp_path, "etc/docker/daemon.json", '{"runtimes": {')
    configs = {c.engine: c for c in read_all(tmp_path)}
    assert configs["containerd"].error is not None and "cannot parse" in configs["containerd"].error
    assert configs["docker"].error is not None and configs["docker"].path == "/etc/docker/daemon.json"


def test_crio_drop_in(tmp_path):
    write(
        tmp_path,
        "etc/crio/crio.conf.d/99-nvidia.conf",
        '[crio.runtime]\ndefault_runtime = "nvidia"\n'
        '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n',
    )
    (c,) = read_all(tmp_path)
    assert c.engine == "cri-o" and c.nvidia_is_default


def test_docker_default_runtime(tmp_path):
    write(
        tmp_path, "etc/docker/daemon.json", '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'
    )
    (c,) = read_all(tmp_path)
    assert c.nvidia == ("nvidia",) and c.default == "runc" and not c.nvidia_is_default
