"""The machine label (gfd/labels/machine.py): the DMI product name as NVIDIA sanitises it."""

from __future__ import annotations

import pytest

from gfd.labels.machine import machine_value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("DGX A100", "DGX-A100"),
        ("  g4dn.xlarge\n", "g4dn.xlarge"),
        ("PowerEdge  R750 ", "PowerEdge-R750"),  # NVIDIA's sanitising since v0.16: runs of spaces are one -
        ("ProLiant DL380 Gen10 (P123)", "ProLiant-DL380-Gen10-P123"),
        ("ThinkSystem SR675 V3 \u2122", "ThinkSystem-SR675-V3"),
        ("To Be Filled By O.E.M.", "To-Be-Filled-By-O.E.M"),  # NVIDIA keeps the final ".": no valid label
        (None, "unknown"),  # no machine-type file
        ("", ""),  # an empty one: NVIDIA writes the empty value
        ("()", ""),
    ],
)
def test_machine_value(raw: str | None, expected: str) -> None:
    assert machine_value(raw) == expected
