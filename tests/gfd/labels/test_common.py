"""What every labeler shares: the options, as the daemon's settings ask for them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gfd.config import load_settings
from gfd.labels import LabelOptions
from gfd.sharing_config import SharingConfig

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_options_from_the_default_settings() -> None:
    assert LabelOptions.from_settings(load_settings([], {}), NOW) == LabelOptions()


def test_options_from_flags() -> None:
    settings = load_settings(["--mig-strategy", "mixed", "--with-vgpu", "--timestamp"], {})
    opts = LabelOptions.from_settings(settings, NOW)
    assert opts == LabelOptions(mig_strategy="mixed", timestamp=NOW, with_vgpu=True)


def test_no_timestamp_wins_over_timestamp() -> None:
    settings = load_settings(["--timestamp", "--no-timestamp"], {})
    assert LabelOptions.from_settings(settings, NOW).timestamp is None


def test_the_config_files_sharing_section_is_handed_on() -> None:
    sharing = SharingConfig()
    opts = LabelOptions.from_settings(replace(load_settings([], {}), sharing=sharing), NOW)
    assert opts.sharing is sharing
