"""Value sanitising as NVIDIA does it, and fitting values into 63 characters."""

from __future__ import annotations

import pytest

from gfd.inventory import Device, Inventory
from gfd.labels import LabelOptions, build_labels, sanitize
from k8slabels import value_problem


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("Tesla T4", "Tesla-T4"),
        ("Orin (nvgpu)", "Orin-nvgpu"),
        ("NVIDIA  GeForce   RTX 4090", "NVIDIA-GeForce-RTX-4090"),
        ("Quadro RTX 8000/PCIe", "Quadro-RTX-8000PCIe"),
        ("  A_b.c  ", "A_b.c"),
    ],
)
def test_sanitise_matches_nvidia(raw: str, expected: str) -> None:
    assert sanitize.sanitise(raw) == expected


def test_product_parts_are_joined_with_dashes() -> None:
    assert sanitize.product("NVIDIA A100-SXM4-40GB", "1g.5gb") == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert sanitize.product("Tesla T4", shared=True) == "Tesla-T4-SHARED"
    assert sanitize.product("NVIDIA H100 80GB HBM3", "1g.10gb.me", shared=True) == (
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me-SHARED"
    )


def test_overlong_product_is_shortened_keeping_its_suffix() -> None:
    model = "NVIDIA Experimental Accelerator With A Very Long Marketing Name 96GB"
    value = sanitize.product(model, "1g.12gb", shared=True)
    assert len(value) <= 63
    assert value.endswith("-MIG-1g.12gb-SHARED")
    assert value.startswith("NVIDIA-Experimental-Accelerator")
    assert value_problem(value) is None


def test_shortening_never_leaves_a_dash_before_the_suffix() -> None:
    # The cut falls right after a dash in the model name; it must not give "...--SHARED".
    model = "A" * 55 + " BBBBBBBBBB"
    value = sanitize.product(model, shared=True)
    assert value == "A" * 55 + "-SHARED"


def test_a_model_with_nothing_printable_leaves_only_the_suffix() -> None:
    assert sanitize.product("®™", "1g.5gb") == "MIG-1g.5gb"
    assert sanitize.product("®™") == ""


def test_overlong_gpu_name_still_labels_the_node() -> None:
    # NVIDIA GFD writes a 67-character product here and the label silently vanishes.
    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition With A Long Suffix Ab"
    inv = Inventory(backend="nvml", devices=(Device(index=0, name=name, memory_mib=1),))
    labels = build_labels(inv, LabelOptions()).labels
    assert labels["nvidia.com/gpu.product"].startswith("NVIDIA-RTX-PRO-6000-Blackwell")
    assert len(labels["nvidia.com/gpu.product"]) == 63


def test_a_profile_with_nothing_printable_leaves_no_dangling_dash() -> None:
    assert sanitize.product("Tesla T4", ":") == "Tesla-T4-MIG"
    assert sanitize.product("Tesla T4", "1g.", shared=True) == "Tesla-T4-MIG-1g-SHARED"
