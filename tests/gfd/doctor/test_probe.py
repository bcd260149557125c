"""The in-container probe: run as the pod runs it (`python3 -m gfd.doctor.probe`) over NVIDIA's mock NVML
library and over no library, and its one JSON line read back as the doctor reads a pod's log."""

from __future__ import annotations

import ctypes.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.backends.nvml_errors import LIBRARY_NOT_FOUND
from gfd.doctor.probe import ProbeOutputError, ProbeResult, device_nodes
from tests.gfd.doctor.smoke.shapes import UUID, probe
from tests.parity import peers


def run_probe(env: dict[str, str]) -> tuple[int, ProbeResult, str]:
    done = subprocess.run(
        [sys.executable, "-m", "gfd.doctor.probe"], env=env, capture_output=True, text=True, timeout=60,
        cwd=peers.ROOT,
    )  # fmt: skip
    return done.returncode, ProbeResult.from_log(done.stdout), done.stdout


def test_the_probe_reports_the_one_gpu_the_runtime_gave_it():
    peers.require()
    env = peers.mock_env("dgxa100") | {"MOCK_NVML_VISIBLE_DEVICES": UUID, "NVIDIA_VISIBLE_DEVICES": UUID}
    code, result, out = run_probe(env)
    assert code == 0, out
    assert out.count("\n") == 1 and out.startswith('{"gfd-smoke-probe":')
    assert result.nvml.ok and result.visible_devices == UUID
    assert (result.driver_version, result.cuda_driver_version) == ("550.54.15", 12040)
    assert [(g.name, g.uuid, g.minor) for g in result.gpus] == [("Mock NVIDIA A100-SXM4-40GB", UUID, 3)]


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVML library"
)
def test_without_the_library_the_probe_says_library_not_found_and_exits_1(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "LD_LIBRARY_PATH": str(tmp_path),
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    }
    code, result, _ = run_probe(env)
    assert code == 1
    assert not result.nvml.ok and result.nvml.code == LIBRARY_NOT_FOUND
    assert result.nvml.advice == (
        "libnvidia-ml.so.1 is not in this container: run the pod with runtimeClassName: nvidia (or make "
        "nvidia the default container runtime) and NVIDIA_VISIBLE_DEVICES=all, "
        "NVIDIA_DRIVER_CAPABILITIES=utility"
    )
    assert result.visible_devices is None and result.gpus == ()


def test_the_last_probe_line_in_a_log_is_read_back_whole():
    first, last = probe(), probe(cuda=13000)
    log = f"starting\n{first.line()}\nsome other output\n{last.line()}\n"
    assert ProbeResult.from_log(log) == last


@pytest.mark.parametrize(
    ("log", "error"),
    [
        ("", "no probe result in the log"),
        ("Traceback (most recent call last):\nModuleNotFoundError", "no probe result in the log"),
        ('{"gfd-smoke-probe": {"nvml": {"ok": true}', "unreadable probe result"),
        ('{"gfd-smoke-probe": {"nvml": {"ok": 1}, "device_nodes": []}}', "nvml.ok: expected bool, got int"),
        ('{"gfd-smoke-probe": {"nvml": {"ok": true}, "device_nodes": [1]}}', "device_nodes: expected str"),
        ('{"gfd-smoke-probe": {"nvml": {"ok": true}, "device_nodes": [], '
         '"gpus": [{"index": true, "name": "x"}]}}', "gpus.index: expected int, got bool"),
        ('{"gfd-smoke-probe": {"nvml": {"ok": true}}}', "unreadable probe result: 'device_nodes'"),
    ],
)  # fmt: skip
def test_a_log_without_a_sound_result_is_a_one_line_error(log, error):
    with pytest.raises(ProbeOutputError) as caught:
        ProbeResult.from_log(log)
    assert error in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="making character devices needs root")
def test_device_nodes_are_the_nvidia_character_devices(tmp_path: Path):
    for name, minor in (("nvidiactl", 255), ("nvidia0", 0), ("nvidia-uvm", 1)):
        os.mknod(tmp_path / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    (tmp_path / "nvidia1").write_text("a plain file is no device")
    (tmp_path / "null").write_text("")
    assert device_nodes(tmp_path) == tuple(str(tmp_path / n) for n in ("nvidia-uvm", "nvidia0", "nvidiactl"))


def test_the_line_is_json_under_one_key():
    assert list(json.loads(probe().line())) == ["gfd-smoke-probe"]
