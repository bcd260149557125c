"""What a rescan says: each rejection and override once while it lasts, and again when it comes back."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nfd_lite.files.features import FeatureState
from nfd_lite.files.policy import Policy
from nfd_lite.files.scanreport import ScanReporter
from nfd_lite.metrics import WriterMetrics


def reporter(directory: Path) -> ScanReporter:
    return ScanReporter(FeatureState([directory], Policy()), WriterMetrics())


def test_a_rejection_is_logged_and_counted_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scan = reporter(tmp_path)
    broken, fixed = "nvidia.com/gpu.count=2\nbad key=1\n", "nvidia.com/gpu.count=2\n"
    with caplog.at_level(logging.WARNING, logger="nfd_lite"):
        for content in (broken, broken, broken, fixed, broken, broken):
            (tmp_path / "gfd").write_text(content)
            scan.rescan()
    rejections = [m for m in caplog.messages if m.startswith("rejected ")]
    assert len(rejections) == 2 and rejections[0] == rejections[1]
    assert rejections[0].startswith(
        f"rejected {tmp_path / 'gfd'}:2 feature.node.kubernetes.io/bad...(34 chars): invalid-key"
    )
    (rejection,) = scan.features.rejected
    counted = scan.metrics.registry.get_sample_value
    assert counted("nfd_lite_rejected_lines_total", {"reason": rejection.reason}) == 2


def test_an_override_is_logged_once_while_it_lasts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    scan = reporter(tmp_path)
    (tmp_path / "a").write_text("nvidia.com/gpu.count=2\n")
    (tmp_path / "b").write_text("nvidia.com/gpu.count=4\n")
    with caplog.at_level(logging.WARNING, logger="nfd_lite"):
        scan.rescan()
        scan.rescan()
        (tmp_path / "b").unlink()
        scan.rescan()
        (tmp_path / "b").write_text("nvidia.com/gpu.count=4\n")
        scan.rescan()
    overrides = [m for m in caplog.messages if "overrides nvidia.com/gpu.count" in m]
    assert len(overrides) == 2
