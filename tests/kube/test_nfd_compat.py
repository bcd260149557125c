"""Drop-in compatibility with upstream NFD on the real kube-apiserver: the feature file gfd writes in the
chart's hostPath mode (features.d) gives a Node the same nvidia.com/ labels through NFD's own nfd-worker and
nfd-master as through nfd-lite, first and after the file changes (values changed, labels gone)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kube.controlplane import ROOT, ControlPlane
from tests.kube.nfd import NfdProcess, UpstreamNfd, as_kubelet_registers, nfd_labels
from tests.kube.writer import PodWriter, eventually, in_pod

PROFILES = ROOT / "profiles"


def gfd_oneshot(profile: str, features_dir: Path) -> dict[str, str]:
    """gfd writes its feature file as the chart's hostPath mode has it; returns the labels it wrote."""
    output = features_dir / "gfd"
    subprocess.run(
        [sys.executable, "-m", "gfd", "--oneshot", "--backend", "mock",
         "--mock-profile", str(PROFILES / profile), "--output-file", str(output)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    lines = output.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.fixture(scope="module")
def upstream(kube: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamNfd]:
    """NFD installed from its own manifests, with nfd-master running on a node of its own."""
    master_node = "nfd-master-host"
    kube.create_node(master_node)
    with UpstreamNfd(kube, tmp_path_factory.mktemp("nfd")) as nfd:
        nfd.start_master(master_node).wait_healthy()
        yield nfd
    kube.delete_node(master_node)


def _wait_for(kube: ControlPlane, node: str, want: dict[str, str], process: NfdProcess | PodWriter) -> None:
    arrived = eventually(lambda: nfd_labels(kube, node) == want, 60)
    assert arrived, f"{node}: {nfd_labels(kube, node)} != {want}\n{process.output()[-3000:]}"


@pytest.mark.parametrize("profile", ["dgx-a100-mig.yaml", "workstation-mixed-gpus.yaml"])
def test_nfd_and_nfd_lite_give_the_same_nvidia_labels(
    kube: ControlPlane, upstream: UpstreamNfd, new_node: Callable[..., str], tmp_path: Path, profile: str
) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    written = gfd_oneshot(profile, features)
    assert written.get("nvidia.com/gpu.present") == "true"
    by_nfd, by_lite = (as_kubelet_registers(kube, new_node(prefix=p)) for p in ("nfd", "lite"))

    worker = upstream.start_worker(by_nfd, features)
    try:
        _wait_for(kube, by_nfd, written, worker)
    finally:
        worker.stop()

    args = ["--features-dir", str(features), "--oneshot", "--metrics-address", "", "--startup-grace", "0"]
    command, env = in_pod(kube, tmp_path, by_lite, args)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert nfd_labels(kube, by_lite) == nfd_labels(kube, by_nfd) == written


def test_a_changed_file_changes_both_alike(
    kube: ControlPlane, upstream: UpstreamNfd, new_node: Callable[..., str], tmp_path: Path
) -> None:
    """Both watch the same directory; gfd rewrites the file for another machine: values change and labels
    the new machine lacks (the A100 count) go from both Nodes."""
    features = tmp_path / "features.d"  # the directory PodWriter hands to nfd-lite
    features.mkdir()
    first = gfd_oneshot("dgx-a100-mig.yaml", features)
    by_nfd, by_lite = (as_kubelet_registers(kube, new_node(prefix=p)) for p in ("nfd", "lite"))
    worker = upstream.start_worker(by_nfd, features)
    with PodWriter(kube, tmp_path, by_lite) as writer:
        try:
            _wait_for(kube, by_nfd, first, worker)
            _wait_for(kube, by_lite, first, writer)

            second = gfd_oneshot("t4-cloud.yaml", features)
            gone = set(first) - set(second)
            assert "nvidia.com/gpu.count.NVIDIA-A100-SXM4-40GB" in gone
            _wait_for(kube, by_nfd, second, worker)
            _wait_for(kube, by_lite, second, writer)
            assert not gone & set(kube.labels(by_nfd)) and not gone & set(kube.labels(by_lite))
        finally:
            worker.stop()
