"""Fake hosts for gfd doctor: a copy of a fixture tree, NVML faked under the real bindings, a clean env."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gfd.doctor.cli import main
from gfd.machine_profile import MachineProfile
from tests.fakes.fake_nvml import install_fake_nvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HOSTS = FIXTURES / "hosts"
# A host tree may be laid over another team fixture (read-only) instead of copying its files.
BASES = {"jetson-orin": FIXTURES / "jetson" / "orin-nano-r36"}


def _gpus(name: str, count: int, first_bus: list[str]) -> list[dict[str, Any]]:
    return [{"name": name, "pci_bus_id": bus, "compute_capability": "8.0"} for bus in first_bus[:count]]


# What NVML answers on each fake host (its driver and GPUs), matching the files in the host tree.
PROFILES: dict[str, dict[str, Any]] = {
    "healthy-pci": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "devices": _gpus("NVIDIA A100-SXM4-40GB", 2, ["00000000:07:00.0", "00000000:0F:00.0"]),
    },
    "version-mismatch": {"driver_version": "535.104.05", "cuda_driver_version": 12020, "devices": []},
    "containerd-no-nvidia": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "devices": _gpus("NVIDIA GeForce RTX 4090", 1, ["00000000:41:00.0"]),
    },
    "k3s": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "devices": _gpus("NVIDIA L4", 1, ["00000000:01:00.0"]),
    },
    # A DGX A100's eight GPUs on the PCI bus, the one at 0000:b7:00.0 fallen off: NVML reports seven.
    "dgx-a100-one-gpu-missing": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "devices": _gpus(
            "NVIDIA A100-SXM4-40GB",
            7,
            [f"00000000:{bus}:00.0" for bus in ("07", "0F", "47", "4E", "87", "90", "BD")],
        ),
    },
    "docker-only": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "devices": _gpus("NVIDIA GeForce RTX 3090", 1, ["00000000:2D:00.0"]),
    },
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kubeconfig or in-cluster config leaks in from the machine running the tests."""
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


@pytest.fixture
def host(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a fake host tree into tmp_path; device files get the driver's default mode 0666."""

    def make(name: str) -> Path:
        root = tmp_path / name
        if name in BASES:
            shutil.copytree(BASES[name], root, symlinks=True)
        shutil.copytree(HOSTS / name, root, symlinks=True, dirs_exist_ok=True)
        for dev in (root / "dev").rglob("*") if (root / "dev").is_dir() else []:
            if dev.is_file():
                dev.chmod(0o666)
        return root

    return make


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """Fake NVML for a named host (PROFILES) or a given profile dict; keyword arguments go to the fake."""

    def install(profile: str | dict[str, Any] | None, **kwargs: Any) -> Any:
        data = PROFILES[profile] if isinstance(profile, str) else profile
        prof = msgspec.convert(data, MachineProfile) if data is not None else None
        return install_fake_nvml(monkeypatch, prof, **kwargs)

    return install


@pytest.fixture
def doctor(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, dict[str, Any]]]:
    """Run `gfd doctor --json` with extra arguments; answer (exit code, parsed report)."""

    def run(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
        code = main(["--host-root", str(root), "--json", *args])
        out = capsys.readouterr().out
        return code, json.loads(out)

    return run
