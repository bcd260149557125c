"""The CUDA -> minimum driver table against pairs known from NVIDIA's release notes."""

from __future__ import annotations

import re

import pytest

from gfd.doctor.cuda_table import (
    load_table,
    parse_cuda,
    parse_driver,
    releases_without_toolkit_driver,
    verdict,
)

# (driver, CUDA of the image, expected kind)
KNOWN = [
    ("525.60.13", "12.0", "full"),  # 12.0 GA's own driver
    ("525.60.13", "12.4", "minor-compat"),  # any 12.x on the 12.0 driver, limited features
    ("525.60.12", "12.0", "too-old"),  # one below 12.0 GA's floor
    ("470.82.01", "12.0", "too-old"),  # the 470 branch never runs 12.x
    ("470.82.01", "12.8", "too-old"),
    ("470.42.01", "11.4", "full"),
    ("470.82.01", "11.8", "minor-compat"),  # 11.x minor compatibility from 450.80.02
    ("450.80.02", "11.8", "minor-compat"),
    ("450.80.02", "11.0", "full"),
    ("450.36.06", "11.1", "too-old"),  # the 11.0 RC driver is below the 11.x compatibility floor
    ("535.104.05", "12.2", "full"),
    ("550.54.14", "12.4", "full"),
    ("550.54.15", "12.5", "minor-compat"),
    ("570.26", "12.8", "full"),
    ("570.124.06", "12.9", "minor-compat"),
    ("575.57.08", "13.0", "too-old"),  # 13.x needs the R580 branch
    ("580.65.06", "13.0", "full"),
    ("580.95.05", "13.2", "minor-compat"),
    ("580.65.06", "12.9", "full"),  # newer drivers run older CUDA
    ("610.43.02", "13.3", "full"),
    ("610.43.02", "13.4", "minor-compat"),  # 13.4 and 13.5: no toolkit driver row, the R580 floor applies
    ("580.65.06", "13.5", "minor-compat"),
    ("580.65.05", "13.5", "too-old"),
    ("570.124.06", "13.4", "too-old"),
    ("550.54.15", "10.2", "unknown"),  # before CUDA 11: not in the table
]


@pytest.mark.parametrize(("driver", "cuda", "kind"), KNOWN)
def test_known_driver_cuda_pairs(driver, cuda, kind):
    assert verdict(load_table(), driver, parse_cuda(cuda)).kind == kind


def test_table_covers_every_minor_release_from_11_0_to_13_3():
    table = load_table()
    expected = [(11, m) for m in range(9)] + [(12, m) for m in (0, 1, 2, 3, 4, 5, 6, 8, 9)]
    expected += [(13, m) for m in range(4)]
    assert sorted(table.toolkit_driver) == expected
    assert table.minor_compat == {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def test_the_table_knows_cuda_13_4_and_13_5_without_a_toolkit_driver_and_nothing_newer():
    table = load_table()
    assert releases_without_toolkit_driver() == [(13, 4), (13, 5)]
    assert not set(releases_without_toolkit_driver()) & set(table.toolkit_driver)
    assert table.known_up_to == (13, 5) and table.knows((13, 5)) and not table.knows((13, 6))
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table.checked)


def test_table_is_monotonic():
    # a later CUDA release never needs an older driver: catches a typo in the data file
    table = load_table()
    ordered = [parse_driver(table.toolkit_driver[v]) for v in sorted(table.toolkit_driver)]
    assert ordered == sorted(ordered)


@pytest.mark.parametrize(
    ("driver", "highest"),
    [("550.54.15", (12, 4)), ("470.82.01", (11, 4)), ("580.95.05", (13, 0)), ("525.85.12", (12, 0))],
)
def test_highest_supported_cuda(driver, highest):
    assert load_table().highest_supported(driver) == highest


def test_driver_reported_cuda_wins_for_releases_newer_than_the_table():
    table = load_table()
    assert verdict(table, "616.10", (13, 4)).kind == "minor-compat"
    assert verdict(table, "616.10", (13, 4), reported=(13, 4)).kind == "full"


@pytest.mark.parametrize("bad", ["12", "12.x", "v12.4", "12.4.1", ""])
def test_parse_cuda_rejects_anything_but_x_y(bad):
    with pytest.raises(ValueError):
        parse_cuda(bad)


def test_driver_versions_compare_numerically():
    assert parse_driver("570.124.06") > parse_driver("570.26")
    assert parse_driver("535.104.05") > parse_driver("535.54.03")
