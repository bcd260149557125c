"""The contract between the two halves: every label gfd writes gets through nfd-lite as shipped.

The golden files are gfd's labels for every shipped machine profile under every MIG strategy and the
sharing examples. Each is written the way the daemon writes it (``gfd.writer.render``, with an expiry),
read back by nfd-lite's line parser, and held to nfd-lite's default key policy: a label family gfd adds
that the default ``--allow-key`` patterns (and so the chart's admission policy, which mirrors them) do
not admit would silently never reach the Node.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gfd.writer import render
from nfd_lite.files.labelline import parse_text
from nfd_lite.files.policy import Policy

GOLDEN = Path(__file__).parent / "gfd" / "golden"
GOLDEN_FILES = sorted(GOLDEN.glob("*.labels"))


def golden_labels(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_there_are_golden_files_to_check() -> None:
    # A moved golden directory must not turn this contract into a test of nothing.
    assert len(GOLDEN_FILES) >= 20


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_every_golden_label_is_read_and_admitted_by_nfd_lite(path: Path) -> None:
    labels = golden_labels(path)
    now = datetime(2026, 12, 3, tzinfo=UTC)
    result = parse_text(render(labels, now + timedelta(minutes=3)), str(path), now)
    assert result.ok and result.rejected == [] and result.expired == []
    assert {key: line.value for key, line in result.label_lines.items()} == labels
    refused = {key: problem for key in labels if (problem := Policy().problem(key)) is not None}
    assert refused == {}
