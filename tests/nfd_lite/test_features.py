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
    assert state.labels(NOW) == {"nvidia.com/gpu.count": "2"}
    assert [r.reason for r in state.rejected] == [readfile.NOT_UTF8]
    path.unlink()
    state.rescan(NOW)
    assert state.labels(NOW) == {}


def test_labels_expire_by_the_clock_and_the_next_expiry_is_known(tmp_path: Path) -> None:
    soon = NOW + timedelta(minutes=5)
    (tmp_path / "f").write_text(f"keep=1\n# +expiry-time={soon.isoformat()}\ngone=1\n")
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    assert state.next_expiry(NOW) == soon
    assert "feature.node.kubernetes.io/gone" in state.labels(NOW)
    assert state.labels(soon) == {"feature.node.kubernetes.io/keep": "1"}
    assert state.next_expiry(soon) is None
