"""Scanning feature directories: which files are read and in which order."""

from __future__ import annotations

from pathlib import Path

from tests.nfd_lite.reading import read_dirs


def test_files_merge_in_name_order_later_wins_and_dot_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "b").write_text("k=from-b\n")
    (tmp_path / "a").write_text("k=from-a\nonly-a=1\n")
    (tmp_path / ".b.tmp").write_text("k=from-temp\n")
    got, rejected = read_dirs(tmp_path)
    assert got == {"feature.node.kubernetes.io/k": "from-b", "feature.node.kubernetes.io/only-a": "1"}
    assert rejected == []


def test_missing_directory_gives_nothing(tmp_path: Path) -> None:
    assert read_dirs(tmp_path / "absent") == ({}, [])


def test_directories_are_merged_in_the_order_given(tmp_path: Path) -> None:
    first, second = tmp_path / "source.d", tmp_path / "features.d"
    first.mkdir()
    second.mkdir()
    (first / "z").write_text("k=first\n")
    (second / "a").write_text("k=second\n")
    assert read_dirs(first, second)[0] == {"feature.node.kubernetes.io/k": "second"}
