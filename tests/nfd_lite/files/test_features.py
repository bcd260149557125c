"""The desired labels over time: a file's last good content, and labels expiring by the clock."""

from __future__ import annotations

import errno
import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nfd_lite.files import readfile, scan
from nfd_lite.files.features import FeatureState
from nfd_lite.files.policy import Policy
from tests.nfd_lite.reading import NOW


def test_a_file_that_turns_bad_keeps_its_last_good_content(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    path.write_text("nvidia.com/gpu.count=2\n")
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    path.write_bytes(b"nvidia.com/gpu.count=\xff\n")
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.count": "2"}
    assert [r.reason for r in state.rejected] == [readfile.NOT_UTF8]
    path.unlink()
    state.rescan(NOW)
    assert state.labels() == {}


def test_labels_expire_when_read_at_their_time_and_the_next_expiry_is_known(tmp_path: Path) -> None:
    soon = NOW + timedelta(minutes=5)
    (tmp_path / "a").write_text("gone=a\n")
    (tmp_path / "f").write_text(f"keep=1\n# +expiry-time={soon.isoformat()}\ngone=1\n")
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    assert state.next_expiry() == soon
    assert state.labels()["feature.node.kubernetes.io/gone"] == "1"
    state.rescan(soon)
    assert state.labels() == {
        "feature.node.kubernetes.io/keep": "1",
        "feature.node.kubernetes.io/gone": "a",
    }
    assert [(e.line, e.key) for e in state.expired] == [(3, "feature.node.kubernetes.io/gone")]
    assert state.next_expiry() is None


def test_last_good_content_is_held_to_its_expiry_time(tmp_path: Path) -> None:
    soon = NOW + timedelta(minutes=5)
    (tmp_path / "a").write_text("gone=a\n")
    (tmp_path / "f").write_text(f"keep=1\n# +expiry-time={soon.isoformat()}\ngone=1\n")
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    (tmp_path / "f").write_bytes(b"keep=1\n\0")  # turns bad: its last good content stays...
    state.rescan(soon)
    assert state.kept  # ...but not what has expired since, and the earlier file's line counts again
    assert state.labels() == {
        "feature.node.kubernetes.io/keep": "1",
        "feature.node.kubernetes.io/gone": "a",
    }
    assert state.next_expiry() is None


def test_a_directory_that_turns_unreadable_keeps_its_last_good_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an unreadable directory holds is unknown, not gone: its files' last good content stays (root
    is not refused by modes, so the kernel's EACCES is stood in for at the directory's open). A directory
    that no longer exists gives nothing."""
    first, second = tmp_path / "source.d", tmp_path / "features.d"
    for directory in (first, second):
        directory.mkdir()
    (first / "a").write_text("nvidia.com/gpu.count=2\nnvidia.com/gpu.family=x\n")
    (second / "b").write_text("nvidia.com/gpu.family=y\n")
    state = FeatureState([first, second], Policy())
    state.rescan(NOW)
    real_open = os.open

    def first_denied(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if str(path) == str(first):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", first_denied)
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.family": "y"}
    assert [(r.file, r.reason) for r in state.kept] == [(str(first), scan.DIR_UNREADABLE)]
    assert [r.reason for r in state.rejected] == [scan.DIR_UNREADABLE]
    state.rescan(NOW)  # still unreadable: still held
    assert state.labels()["nvidia.com/gpu.count"] == "2"
    monkeypatch.setattr(os, "open", real_open)
    shutil.rmtree(first)
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.family": "y"}
    assert state.kept == []
