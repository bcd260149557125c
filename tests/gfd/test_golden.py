"""Golden label files: every shipped profile under every MIG strategy, plus sharing examples.

Each golden file holds the sorted ``key=value`` lines ``build_labels`` gives
for one case. After a deliberate label change, regenerate them with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/gfd/test_golden.py -q

and review the diff line by line before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

import pytest

from gfd.choices import MigStrategy
from gfd.labels import LabelOptions, build_labels
from gfd.machine_profile import load_machine_profile
from gfd.plugin_config import load_plugin_config

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
GOLDEN = Path(__file__).parent / "golden"
STRATEGIES = get_args(MigStrategy)

# (profile, MIG strategy, sharing example under profiles/sharing/)
SHARING_CASES = [
    ("t4-cloud", "none", "time-slicing"),
    ("t4-cloud", "none", "time-slicing-rename"),
    ("t4-cloud", "none", "mps"),
    ("dgx-a100-mig", "single", "time-slicing"),
    ("dgx-a100-mig", "none", "mps"),
    ("dgx-a100-mig-mixed", "mixed", "mig-mixed-time-slicing"),
]


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.yaml"))


def render(profile: str, strategy: str, sharing: str | None = None) -> str:
    inv = load_machine_profile(PROFILES / f"{profile}.yaml").to_inventory()
    config = load_plugin_config(PROFILES / "sharing" / f"{sharing}.yaml").sharing if sharing else None
    labels = build_labels(inv, LabelOptions(mig_strategy=strategy, sharing=config)).labels  # type: ignore[arg-type]
    return "".join(f"{key}={value}\n" for key, value in sorted(labels.items()))


def check(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.labels"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}; run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8")


def test_the_shipped_profiles_are_all_covered() -> None:
    assert {
        "rtx4090-gaming-pc",
        "t4-cloud",
        "dgx-a100-mig",
        "h100",
        "jetson-orin-nano",
        *NEW_HARDWARE,
    } <= set(profile_names())


# The racks of 2025-2026, each from NVIDIA's own capture (sources at the top of each profile): the facts a
# selector on them depends on, under every MIG strategy.
NEW_HARDWARE = {
    "gb200-nvl72-tray": ("NVIDIA-GB200", "blackwell", "10", "0", "00000001-0000-0000-0000-000000000001.2"),
    "gb300-nvl72-tray": (
        "NVIDIA-GB300",
        "blackwell",
        "10",
        "3",
        "00000001-0000-0000-0000-000000000001.32766",
    ),
    "vr200-nvl-tray": (
        "NVIDIA-Graphics-Device",
        "rubin",
        "10",
        "7",
        "00000000-0000-0000-0000-000000000001.32766",
    ),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", list(NEW_HARDWARE))
def test_the_racks_of_2026_get_their_family_and_clique(profile: str, strategy: str) -> None:
    inv = load_machine_profile(PROFILES / f"{profile}.yaml").to_inventory()
    got = build_labels(inv, LabelOptions(mig_strategy=strategy))  # type: ignore[arg-type]
    keys = ("product", "family", "compute.major", "compute.minor", "clique")
    assert tuple(got.labels[f"nvidia.com/gpu.{k}"] for k in keys) == NEW_HARDWARE[profile]
    assert got.labels["nvidia.com/gpu.count"] == "4"
    assert got.warnings == ()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", profile_names())
def test_profile_labels_match_golden(profile: str, strategy: str) -> None:
    check(f"{profile}.{strategy}", render(profile, strategy))


@pytest.mark.parametrize(("profile", "strategy", "sharing"), SHARING_CASES)
def test_sharing_labels_match_golden(profile: str, strategy: str, sharing: str) -> None:
    check(f"{profile}.{strategy}.{sharing}", render(profile, strategy, sharing))


def test_no_stale_golden_files() -> None:
    expected = {f"{p}.{s}.labels" for p in profile_names() for s in STRATEGIES}
    expected |= {f"{p}.{s}.{c}.labels" for p, s, c in SHARING_CASES}
    assert {p.name for p in GOLDEN.glob("*.labels")} == expected
