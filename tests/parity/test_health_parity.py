"""A GPU failing on an 8-GPU machine, with NVIDIA's gpu-feature-discovery as the oracle for the GPUs that
answer: our labels for the other seven equal NVIDIA's for the 7-GPU machine of the same kind, plus the
degraded labels; when the GPU answers again, the next pass writes the healthy labels, once.

NVIDIA's mock NVML has no faults to inject, so the failing machine is our fake NVML (tests/fakes) built
from the mock's own description of the machine: the same GPUs, driver and bus ids."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gfd.backends.nvml import NvmlBackend
from gfd.config import load_settings
from gfd.daemon import Daemon
from gfd.machine_profile import DeviceSpec, MachineProfile, MigSpec
from gfd.writer import read_feature_file
from tests.fakes.fake_nvml import FakeNvml, install_fake_nvml
from tests.fakes.nvml_faults import HANG, LOST, READ_DEADLINE_S, UNKNOWN, GpuFault, failing
from tests.parity import peers
from tests.parity.test_gfd_labels import EXTRA_KEYS, EXTRA_PREFIXES, HEALTH_KEYS, MACHINE_TYPE

MP = pytest.MonkeyPatch
EIGHT_GPU_MACHINES = ("dgxa100", "dgxh100", "dgxh200", "dgxb200")
FAILING_GPU = 3
WAYS: dict[str, GpuFault] = {
    "lost": LOST,
    "unknown-error": UNKNOWN,
    "failing-query": failing("nvmlDeviceGetMemoryInfo"),
    "hang": HANG,
}


def _nvidia(machine: str, gpus: int, strategy: str, tmp: Path) -> dict[str, str]:
    out = tmp / f"nvidia-{gpus}.labels"
    cmd = [str(peers.NVIDIA_GFD), "--oneshot", "--no-timestamp", "--use-node-feature-api=false"]
    cmd += ["--device-discovery-strategy=nvml", f"--output-file={out}", f"--mig-strategy={strategy}"]
    cmd += [f"--machine-type-file={tmp / 'product_name'}"]
    done = subprocess.run(
        cmd, env=peers.mock_env(machine, gpus=gpus), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pairs = (line.partition("=") for line in out.read_text().splitlines() if line)
    return {key: value for key, _, value in pairs}


def _profile(described: dict[str, Any]) -> MachineProfile:
    """The mock's machine as a profile for the fake: GPU names, memory, capability, bus ids, MIG mode."""
    devices = [
        DeviceSpec(
            name=d["name"],
            uuid=d["uuid"],
            memory_mib=d["memory_mib"],
            compute_capability="{}.{}".format(*d["compute_capability"]),
            pci_bus_id=d["pci_bus_id"],
            mig=MigSpec(enabled=False) if d["mig_capable"] else None,
        )
        for d in described["devices"]
    ]
    return MachineProfile(
        driver_version=described["driver_version"],
        cuda_driver_version=described["cuda_driver_version"],
        devices=devices,
    )


def _ours(fake: FakeNvml, strategy: str, tmp: Path) -> tuple[Daemon, Path]:
    # No PCI class files: NVIDIA's GFD finds none for the mock's GPUs either, so both say gpu.mode=unknown.
    root = fake.write_host_root(tmp / "host")
    out = tmp / "ours.labels"
    argv = ["--backend", "nvml", "--host-root", str(root), "--output-file", str(out)]
    argv += [f"--mig-strategy={strategy}", f"--machine-type-file={tmp / 'product_name'}", "--expiry=24h"]
    backend = NvmlBackend(host_root=root, gpu_timeout=READ_DEADLINE_S)
    return Daemon(load_settings(argv, {}), detect_fn=lambda *a, **k: (backend, None)), out


def _split(labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """NVIDIA's labels, and our health labels."""
    nvidias = {k: v for k, v in labels.items() if k not in EXTRA_KEYS and not k.startswith(EXTRA_PREFIXES)}
    return nvidias, {k.removeprefix("nvidia.com/"): v for k, v in labels.items() if k in HEALTH_KEYS}


@pytest.mark.parametrize("strategy", ["none", "mixed"])
@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("machine", EIGHT_GPU_MACHINES)
def test_the_seven_that_answer_are_labelled_as_nvidia_labels_a_seven_gpu_machine(
    monkeypatch: MP, tmp_path: Path, machine: str, way: str, strategy: str
) -> None:
    peers.require()
    (tmp_path / "product_name").write_text(MACHINE_TYPE + "\n")
    described = peers.describe(peers.mock_env(machine))
    assert len(described["devices"]) == 8
    seven, eight = _nvidia(machine, 7, strategy, tmp_path), _nvidia(machine, 8, strategy, tmp_path)
    assert seven["nvidia.com/gpu.count"] == "7"

    fake = install_fake_nvml(monkeypatch, _profile(described), virtualization_mode=0)
    daemon, out = _ours(fake, strategy, tmp_path)
    fake.break_gpu(FAILING_GPU, WAYS[way])
    sick = [daemon.run_pass() for _ in range(3)]
    assert [p.written for p in sick] == [True, False, False], "one write, then no flapping"
    labels = (read_feature_file(out) or ({}, None))[0]
    assert _split(labels) == (seven, {"gpu.health": "degraded", "gpu.health.answering": "7",
                                      "gpu.health.failing": "1", "gpu.health.on-bus": "8"})  # fmt: skip

    fake.heal(FAILING_GPU)
    if way == "hang":  # the stuck read ends once the GPU answers; the next pass reads it afresh
        assert _wait_idle(daemon)
    back = [daemon.run_pass() for _ in range(3)]
    assert [p.written for p in back] == [True, False, False], "one write back, then no flapping"
    labels = (read_feature_file(out) or ({}, None))[0]
    assert _split(labels) == (eight, {"gpu.health": "ok", "gpu.health.answering": "8",
                                      "gpu.health.failing": "0", "gpu.health.on-bus": "8"})  # fmt: skip


def _wait_idle(daemon: Daemon) -> bool:
    from tests.waiting import eventually

    backend = daemon.backend
    assert isinstance(backend, NvmlBackend)
    return eventually(lambda: not backend.reads.busy(), timeout=10)
