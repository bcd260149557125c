"""`gfd fleet` against a real kube-apiserver, run as a user runs it (a process, an admin's kubeconfig)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.fleet import cli
from gfd.fleet.summary import OWNED
from tests.kube.controlplane import ControlPlane

GOLDEN = Path(__file__).parents[1] / "gfd" / "golden"


def golden(name: str) -> dict[str, str]:
    lines = (GOLDEN / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


H100 = golden("h100.single.labels")


@pytest.fixture(scope="module")
def fleet_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own, so the fleet is exactly the Nodes below."""
    with ControlPlane(tmp_path_factory.mktemp("fleet")) as plane:
        for name, labels, gpus in [
            ("h100-a", H100, "8"),
            ("h100-b", H100, "7"),  # the device plugin lost a GPU
            ("sick", {**H100, "nvidia.com/gpu.health": "degraded"}, "8"),
            ("bare", {"feature.node.kubernetes.io/pci-10de.present": "true"}, None),
            ("cpu", {"kubernetes.io/os": "linux"}, None),
        ]:
            plane.create_node(name, labels)
            if gpu_labels := sorted(k for k in labels if k.startswith("nvidia.com/")):
                plane.patch_node(name, {"metadata": {"annotations": {OWNED: ",".join(gpu_labels)}}})
            if gpus is not None:
                status = {
                    "status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}
                }
                answer = plane.request(
                    "PATCH",
                    f"/api/v1/nodes/{name}/status",
                    status,
                    content_type="application/merge-patch+json",
                )
                assert answer.status == 200, answer.message
        yield plane


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gfd", "fleet", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_fleet_is_summarized_and_its_problems_named(fleet_plane: ControlPlane) -> None:
    result = run("--kubeconfig", str(fleet_plane.admin_kubeconfig), "--json", "--cuda", "12.4")
    assert result.returncode == 1, result.stderr  # problems found
    report = json.loads(result.stdout)
    assert (report["nodes"], report["gpuNodes"], report["gpus"]) == (5, 3, 24)
    assert {(p["node"], p["kind"]) for p in report["problems"]} == {
        ("h100-b", "gpu-count-mismatch"),
        ("sick", "degraded"),
        ("bare", "unlabelled-gpu-node"),
    }
    assert report["cuda"] == {"version": "12.4", "canRun": ["h100-a", "h100-b", "sick"]}
    table = run("--kubeconfig", str(fleet_plane.admin_kubeconfig))
    assert table.returncode == 1
    assert "NVIDIA-H100-80GB-HBM3" in table.stdout and "gpu-count-mismatch" in table.stdout
    assert "3 GPU nodes of 5, 24 GPUs" in table.stdout


def test_every_page_of_nodes_is_read(fleet_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "PAGE", 2)
    assert cli.read(str(fleet_plane.admin_kubeconfig), None).nodes == 5


def test_bad_input_gives_one_line_and_exit_2(fleet_plane: ControlPlane, tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nclusters: [oops\n")
    for args, words in [
        (["--kubeconfig", str(broken)], "cannot be used"),
        (["--kubeconfig", str(tmp_path / "missing")], "cannot be used"),
        (["--kubeconfig", str(fleet_plane.admin_kubeconfig), "--cuda", "twelve"], "--cuda"),
    ]:
        result = run(*args)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gfd fleet: ") and words in lines[0], result.stderr


def test_an_unreachable_api_server_gives_one_line_and_exit_2(
    fleet_plane: ControlPlane, tmp_path: Path
) -> None:
    text = fleet_plane.admin_kubeconfig.read_text().replace(f":{fleet_plane.port}", ":1")
    away = tmp_path / "away.kubeconfig"
    away.write_text(text)
    result = run("--kubeconfig", str(away))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not be read" in lines[0], result.stderr
