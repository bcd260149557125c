"""Our gfd against NVIDIA's gpu-feature-discovery, both over the same mock NVML library.

For every machine the mock simulates, under each MIG layout, MIG strategy and sharing config, our labels
must equal NVIDIA's key for key and value for value, apart from our documented extras; where NVIDIA
refuses a combination, we refuse it too.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from k8slabels import value_problem
from tests.parity import peers

ROOT = peers.ROOT
GFD = ROOT / ".venv/bin/gfd"

# Labels only we write, as listed in docs/labels.md ("Compared with NVIDIA's GFD").
HEALTH_KEYS = {
    "nvidia.com/gpu.health",
    "nvidia.com/gpu.health.answering",
    "nvidia.com/gpu.health.failing",
    "nvidia.com/gpu.health.on-bus",
}
EXTRA_KEYS = {"nvidia.com/gpu.present", "nvidia.com/cuda.runtime-version.code", *HEALTH_KEYS}
EXTRA_PREFIXES = ("nvidia.com/gpu.count.",)

MACHINE_TYPE = "NVIDIA DGX A100"

# MIG layouts: GPU instance profile ids created on each MIG GPU (see the mock's machine package).
LAYOUTS = {
    "mig-off": ("", ""),
    "mig-1g-twice": ("0,0", ""),
    "mig-2g-and-1g": ("1,0", ""),
    "mig-on-empty": ("enabled", ""),
    "mig-on-gpu0-only": ("0,0", "0"),
}

SHARING = {
    "none": None,
    "time-slicing": "timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
    "time-slicing-renamed": (
        "timeSlicing:\n    renameByDefault: true\n"
        "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    ),
    "mps": "mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
}

STRATEGIES = ("none", "single", "mixed")


def _documented_refusal(layout: str, sharing: str) -> str | None:
    """Where NVIDIA refuses and we label instead, as docs/labels.md says."""
    if sharing == "mps" and LAYOUTS[layout][0]:
        return "MPS with MIG on: NVIDIA fails the pass; we label mps.capable=false and warn"
    return None


@dataclass(frozen=True)
class Run:
    code: int
    labels: dict[str, str]
    stderr: str


def _parse(text: str) -> dict[str, str]:
    labels = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            labels[key] = value
    return labels


def _theirs(env: dict[str, str], flags: list[str], tmp: Path) -> Run:
    out = tmp / "nvidia.labels"
    cmd = [str(peers.NVIDIA_GFD), "--oneshot", "--no-timestamp", "--use-node-feature-api=false"]
    cmd += ["--device-discovery-strategy=nvml", f"--output-file={out}", *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    return Run(done.returncode, _parse(out.read_text()) if out.exists() else {}, done.stderr)


def _ours(env: dict[str, str], flags: list[str]) -> Run:
    cmd = [str(GFD), "--oneshot", "--backend", "nvml", "--output-file", "-", *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    return Run(done.returncode, _parse(done.stdout), done.stderr)


def _without_extras(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in EXTRA_KEYS and not k.startswith(EXTRA_PREFIXES)}


def _cases() -> list[object]:
    machines = peers.machines() or ["(not built)"]
    cases = [(m, layout, s, "none") for m in machines for layout in LAYOUTS for s in STRATEGIES]
    # Sharing is per resource, not per model: one machine carries it through every layout and strategy.
    cases += [(machines[0], layout, s, share) for layout in LAYOUTS for s in STRATEGIES for share in SHARING]
    return [pytest.param(*c, id="/".join(c)) for c in dict.fromkeys(cases)]


@pytest.mark.parametrize(("machine", "layout", "strategy", "sharing"), _cases())
def test_labels_equal_nvidias(tmp_path: Path, machine: str, layout: str, strategy: str, sharing: str) -> None:
    peers.require()
    mig, mig_gpus = LAYOUTS[layout]
    env = peers.mock_env(machine, mig, mig_gpus)
    machine_file = tmp_path / "product_name"
    machine_file.write_text(MACHINE_TYPE + "\n")
    flags = [f"--mig-strategy={strategy}", f"--machine-type-file={machine_file}"]
    if (share := SHARING[sharing]) is not None:
        config = tmp_path / "config.yaml"
        config.write_text("version: v1\nsharing:\n  " + share)
        flags.append(f"--config-file={config}")

    theirs, ours = _theirs(env, flags, tmp_path), _ours(env, flags)

    if theirs.code != 0 and _documented_refusal(layout, sharing):
        assert ours.code == 0, ours.stderr
        assert ours.labels["nvidia.com/mps.capable"] == "false"
        return
    if theirs.code != 0:
        assert ours.code != 0, f"NVIDIA refuses this case and we do not:\n{theirs.stderr[-2000:]}"
        return
    assert ours.code == 0, ours.stderr
    assert theirs.labels, "NVIDIA's GFD wrote no labels"
    assert _without_extras(ours.labels) == theirs.labels


MACHINE_TYPES = {
    "plain": "NVIDIA DGX A100",
    "empty": "",
    "punctuation": "ProLiant DL380 Gen10 (P123)",
    "long": "Super Server X13DEG-OAD with eight NVIDIA H100 SXM5 80GB GPUs and NVLink Switch",
    "missing": None,
}


@pytest.mark.parametrize("content", list(MACHINE_TYPES))
def test_machine_type_equals_nvidias(tmp_path: Path, content: str) -> None:
    peers.require()
    env = peers.mock_env(peers.machines()[0])
    machine_file = tmp_path / "product_name"
    if (text := MACHINE_TYPES[content]) is not None:
        machine_file.write_text(text + "\n")
    flags = [f"--machine-type-file={machine_file}"]
    theirs, ours = _theirs(env, flags, tmp_path), _ours(env, flags)
    assert (theirs.code, ours.code) == (0, 0), ours.stderr
    mine, nvidias = ours.labels["nvidia.com/gpu.machine"], theirs.labels["nvidia.com/gpu.machine"]
    if value_problem(nvidias) is None:
        assert mine == nvidias
    else:  # documented: NVIDIA writes a value Kubernetes refuses; ours is made valid instead
        assert value_problem(mine) is None and nvidias.startswith(mine)


CLUSTER = "61248eac-4785-4fbf-9cbd-231635e37e9d"
FABRICS = {
    "one-clique": (f"{CLUSTER}.20663", ""),
    "registering": (f"{CLUSTER}.20663", "1"),  # nvmlGpuFabricState_t 1: not yet completed
    "two-cliques": (f"{CLUSTER}.1,{CLUSTER}.2", ""),
    "two-clusters": (f"{CLUSTER}.7,7f2a1c3e-1b2c-4d5e-8f90-a1b2c3d4e5f6.7", ""),
}


@pytest.mark.parametrize("fabric", list(FABRICS))
@pytest.mark.parametrize("layout", ["mig-off", "mig-1g-twice"])
def test_clique_equals_nvidias(tmp_path: Path, fabric: str, layout: str) -> None:
    peers.require()
    spec, state = FABRICS[fabric]
    env = peers.mock_env("dgxb200", *LAYOUTS[layout]) | {"MOCK_NVML_FABRIC": spec}
    if state:
        env["MOCK_NVML_FABRIC_STATE"] = state
    machine_file = tmp_path / "product_name"
    machine_file.write_text(MACHINE_TYPE + "\n")
    flags = [f"--machine-type-file={machine_file}", "--mig-strategy=mixed"]
    theirs, ours = _theirs(env, flags, tmp_path), _ours(env, flags)
    assert (theirs.code, ours.code) == (0, 0), ours.stderr
    assert _without_extras(ours.labels) == theirs.labels
