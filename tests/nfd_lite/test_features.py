"""The desired labels over time: a file's last good content, and labels expiring by the clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from nfd_lite import readfile
from nfd_lite.features import FeatureState
from nfd_lite.policy import Policy
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
