"""The peers the parity tests run: NVIDIA's gpu-feature-discovery and the mock NVML library, as built
into .cache/peers by scripts/peers/build.sh (scripts/install-tools.sh runs it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_COMMAND = "scripts/peers/build.sh nvidia-mock-nvml nvidia-gfd"
MOCK_DIR = ROOT / ".cache/peers/nvidia-mock-nvml"
MOCK_LIBRARY = MOCK_DIR / "libnvidia-ml.so.1"
DESCRIBE = MOCK_DIR / "nvidia-mock-describe"
NVIDIA_GFD = ROOT / ".cache/peers/nvidia-gfd/gpu-feature-discovery"


def missing() -> list[Path]:
    return [p for p in (MOCK_LIBRARY, DESCRIBE, NVIDIA_GFD) if not p.exists()]


def require() -> None:
    """Fail (never skip: CI builds them) with the command that builds what is missing."""
    if gone := missing():
        names = ", ".join(str(p.relative_to(ROOT)) for p in gone)
        pytest.fail(f"not built: {names}; build them with `{BUILD_COMMAND}`", pytrace=False)


def machines() -> list[str]:
    """The machines the mock library simulates (empty when it is not built: the tests then fail)."""
    if missing():
        return []
    out = subprocess.run([str(DESCRIBE), "--list"], capture_output=True, text=True, check=True).stdout
    names: list[str] = json.loads(out)
    return names


def mock_env(machine: str, mig: str = "", mig_gpus: str = "", gpus: int | None = None) -> dict[str, str]:
    """An environment whose NVML is the mock simulating ``machine`` (its first ``gpus`` GPUs, or all)
    with the given MIG layout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GFD_", "MOCK_NVML_"))}
    for name in ("CONFIG_FILE", "MIG_STRATEGY", "NODE_NAME", "KUBECONFIG"):
        env.pop(name, None)
    env["LD_LIBRARY_PATH"] = str(MOCK_DIR)
    env["MOCK_NVML_MACHINE"] = machine
    if mig:
        env["MOCK_NVML_MIG"] = mig
    if mig_gpus:
        env["MOCK_NVML_MIG_GPUS"] = mig_gpus
    if gpus is not None:
        env["MOCK_NVML_NUM_DEVICES"] = str(gpus)
    return env


def describe(env: dict[str, str]) -> dict[str, Any]:
    """The machine the mock serves under ``env``, from go-nvml's data."""
    out = subprocess.run([str(DESCRIBE)], env=env, capture_output=True, text=True, check=True).stdout
    machine: dict[str, Any] = json.loads(out)
    return machine
