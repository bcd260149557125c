"""Reading feature directories as the writer does (FeatureState, default policy), for tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from nfd_lite.files.features import FeatureState
from nfd_lite.files.policy import Policy
from nfd_lite.files.rejections import Rejection

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def read_dirs(*dirs: Path) -> tuple[dict[str, str], list[Rejection]]:
    """The labels and rejections of one scan of ``dirs`` at ``NOW``."""
    state = FeatureState(list(dirs), Policy())
    state.rescan(NOW)
    return state.labels(), state.rejected
