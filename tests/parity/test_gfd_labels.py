"""Our gfd against NVIDIA's gpu-feature-discovery, both over the same mock NVML library.

For every machine the mock simulates, under each MIG layout, MIG strategy and sharing config, our labels
must equal NVIDIA's key for key and value for value, apart from our documented extras; where NVIDIA
refuses a combination, we refuse it too.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gfd.labels.device import UNKNOWN_FAMILY, family
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

# Where our gpu.family differs from NVIDIA's on purpose, as docs/labels.md says ("Compared with NVIDIA's
# GFD"): compute capability -> (NVIDIA's value, ours). No mock machine has these GPUs, so the label
# comparison expects them by the capability NVIDIA's own labels report, and
# test_nvidias_family_table_differs_from_ours_only_where_documented runs NVIDIA's table itself.
FAMILY_DIFFERENCES = {
    (10, 7): (
        "blackwell",
        "rubin",
    ),  # Vera Rubin: sm_107 since CUDA 13.4; NVIDIA maps every 10.x to blackwell
    (11, 0): ("undefined", "blackwell"),  # Jetson Thor under CUDA 13; NVIDIA's table has no 11
}
# The compute capabilities NVIDIA's GPUs report (https://developer.nvidia.com/cuda-gpus and its legacy page).
REAL_CAPABILITIES = [
    (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0), (3, 2), (3, 5), (3, 7), (5, 0), (5, 2), (5, 3),
    (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 3),
    (10, 7), (11, 0), (12, 0), (12, 1),
]  # fmt: skip
NVIDIA_MODULE = "github.com/NVIDIA/k8s-device-plugin"

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


def _documented(theirs: dict[str, str]) -> dict[str, str]:
    """NVIDIA's labels with the documented gpu.family differences made ours (each checked to be NVIDIA's
    documented value first)."""
    key = "nvidia.com/gpu.family"
    major, minor = theirs.get("nvidia.com/gpu.compute.major"), theirs.get("nvidia.com/gpu.compute.minor")
    if key not in theirs or not (major and minor and major.isdigit() and minor.isdigit()):
        return theirs
    difference = FAMILY_DIFFERENCES.get((int(major), int(minor)))
    if difference is None:
        return theirs
    nvidias, ours = difference
    assert theirs[key] == nvidias, f"NVIDIA's gpu.family for {major}.{minor} is no longer the documented one"
    return theirs | {key: ours}


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
    assert _without_extras(ours.labels) == _documented(theirs.labels)


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


def _nvidias_families(capabilities: list[tuple[int, int]], tmp: Path) -> dict[tuple[int, int], str]:
    """NVIDIA's getArchFamily from the pinned module's own source, compiled and run on ``capabilities``."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOPROXY": "off", "GOTOOLCHAIN": "local"}
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", NVIDIA_MODULE],
        cwd=ROOT / "scripts/peers/nvidia-gfd",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0 and found.stdout.strip(), (
        f"{NVIDIA_MODULE} not in Go's module cache: {found.stderr}"
    )
    source = (Path(found.stdout.strip()) / "internal/lm/resource.go").read_text()
    function = re.search(r"^func getArchFamily\(.*?^}$", source, re.MULTILINE | re.DOTALL)
    assert function is not None, "NVIDIA's getArchFamily moved; find its table again"
    calls = "".join(f"\tfmt.Println(getArchFamily({major}, {minor}))\n" for major, minor in capabilities)
    program = f'package main\n\nimport "fmt"\n\n{function.group(0)}\n\nfunc main() {{\n{calls}}}\n'
    (tmp / "main.go").write_text(program)
    ran = subprocess.run(
        ["go", "run", "main.go"],
        cwd=tmp,
        env={**env, "GOFLAGS": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    return dict(zip(capabilities, ran.stdout.split(), strict=True))


def test_nvidias_family_table_differs_from_ours_only_where_documented(tmp_path: Path) -> None:
    peers.require()
    nvidias = _nvidias_families(REAL_CAPABILITIES, tmp_path)
    ours = {cc: family(*cc) or UNKNOWN_FAMILY for cc in REAL_CAPABILITIES}
    differences = {cc: (nvidias[cc], ours[cc]) for cc in REAL_CAPABILITIES if nvidias[cc] != ours[cc]}
    assert differences == FAMILY_DIFFERENCES
    docs = (ROOT / "docs/labels.md").read_text()
    compared = docs[docs.index("## Compared with NVIDIA's GFD") :]
    for (major, minor), (theirs, mine) in FAMILY_DIFFERENCES.items():
        said = f"**{major}.{minor}** ("
        assert said in compared, (
            f"docs/labels.md does not explain the gpu.family difference at {major}.{minor}"
        )
        line = compared[compared.index(said) :].split(";")[0]
        assert f"`{mine}` here" in line and f"`{theirs}`" in line


# An NVL72 compute tray as the go-nvml mock can make one: its B200 machine cut to a tray's four GPUs, in the
# clique of profiles/gb200-nvl72-tray.yaml (NVIDIA's GB200 capture); no mock machine has GB200, GB300 or
# Rubin GPUs themselves.
TRAY_CLIQUE = "00000001-0000-0000-0000-000000000001.2"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_nvl72_tray_equals_nvidias(tmp_path: Path, strategy: str) -> None:
    peers.require()
    env = peers.mock_env("dgxb200", gpus=4) | {"MOCK_NVML_FABRIC": TRAY_CLIQUE}
    flags = [f"--mig-strategy={strategy}", f"--machine-type-file={tmp_path / 'absent'}"]
    theirs, ours = _theirs(env, flags, tmp_path), _ours(env, flags)
    assert (theirs.code, ours.code) == (0, 0), ours.stderr
    assert ours.labels["nvidia.com/gpu.clique"] == TRAY_CLIQUE and ours.labels["nvidia.com/gpu.count"] == "4"
    assert _without_extras(ours.labels) == _documented(theirs.labels)
