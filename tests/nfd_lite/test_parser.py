"""Feature-file parsing with real files: what becomes a label, what is rejected and why."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import featurefile
from nfd_lite import parser
from nfd_lite.features import FeatureState
from nfd_lite.policy import Policy

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def labels(text: str) -> dict[str, str]:
    return {k: f.value for k, f in parser.parse_text(text, "f", NOW).features.items()}


def test_key_value_bare_key_comments_and_default_prefix() -> None:
    text = "# a comment\n\nnvidia.com/gpu.count=8\n  gpu.present  \nempty=\n"
    assert labels(text) == {
        "nvidia.com/gpu.count": "8",
        "feature.node.kubernetes.io/gpu.present": "true",
        "feature.node.kubernetes.io/empty": "",
    }


def test_value_keeps_everything_after_the_first_equals_sign() -> None:
    result = parser.parse_text("a=b=c\n", "f", NOW)
    assert result.rejected[0].reason == parser.INVALID_VALUE  # "b=c" is not a valid label value
    assert result.features == {}


def test_no_label_applies_to_the_next_feature_only() -> None:
    assert labels("# +no-label\nhidden=1\nshown=2\n") == {"feature.node.kubernetes.io/shown": "2"}


def test_no_label_removes_an_earlier_value_of_the_same_key() -> None:
    assert labels("k=1\n# +no-label\nk=2\n") == {}


def test_no_feature_does_not_hide_labels() -> None:
    assert labels("# +no-feature\nk=1\n") == {"feature.node.kubernetes.io/k": "1"}


def test_expiry_applies_to_the_following_features_and_past_ones_are_dropped() -> None:
    future = (NOW + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    text = f"before=1\n# +expiry-time=2020-01-01T00:00:00Z\nold=1\n# +expiry-time={future}\nsoon=1\n"
    result = parser.parse_text(text, "f", NOW)
    assert sorted(result.features) == ["feature.node.kubernetes.io/before", "feature.node.kubernetes.io/soon"]
    assert result.features["feature.node.kubernetes.io/soon"].expires == NOW + timedelta(hours=1)
    assert result.features["feature.node.kubernetes.io/before"].expires is None


BAD = ["# +expiry-time=tomorrow", "# +expiry-time=2026-01-01", "# +expiry-time", "# +bogus"]


@pytest.mark.parametrize("line", BAD)
def test_bad_directives_are_rejected_with_their_line(line: str) -> None:
    result = parser.parse_text(f"a=1\n{line}\nb=2\n", "f", NOW)
    assert [(r.line, r.reason) for r in result.rejected] == [(2, parser.BAD_DIRECTIVE)]
    assert len(result.features) == 2  # a bad directive changes nothing else


def test_invalid_keys_and_values_are_rejected_by_line() -> None:
    text = "ok=1\nbad key=1\nnvidia.com/x=" + "v" * 64 + "\nUPPER.Example/x=1\n"
    result = parser.parse_text(text, "f", NOW)
    assert [(r.line, r.reason) for r in result.rejected] == [
        (2, parser.INVALID_KEY),
        (3, parser.INVALID_VALUE),
        (4, parser.INVALID_KEY),
    ]
    assert list(result.features) == ["feature.node.kubernetes.io/ok"]


def scan(*dirs: Path) -> tuple[dict[str, str], list[parser.Rejection]]:
    state = FeatureState(list(dirs), Policy())
    state.rescan(NOW)
    return state.labels(), state.rejected


def test_files_merge_in_name_order_later_wins_and_dot_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "b").write_text("k=from-b\n")
    (tmp_path / "a").write_text("k=from-a\nonly-a=1\n")
    (tmp_path / ".b.tmp").write_text("k=from-temp\n")
    got, rejected = scan(tmp_path)
    assert got == {"feature.node.kubernetes.io/k": "from-b", "feature.node.kubernetes.io/only-a": "1"}
    assert rejected == []


def test_a_bad_file_is_rejected_whole_and_the_others_still_apply(tmp_path: Path) -> None:
    (tmp_path / "big").write_text("k=1\n" * 20000)
    (tmp_path / "latin1").write_bytes(b"k=caf\xe9\n")
    (tmp_path / "binary").write_bytes(b"k=1\n\0\0\0")
    (tmp_path / "good").write_text("nvidia.com/gpu.ok=yes\n")
    if os.geteuid() != 0:  # root reads mode-000 files anyway
        unreadable = tmp_path / "secret"
        unreadable.write_text("k=1\n")
        unreadable.chmod(0)
    got, rejected = scan(tmp_path)
    assert got == {"nvidia.com/gpu.ok": "yes"}
    reasons = {Path(r.file).name: r.reason for r in rejected}
    assert reasons["big"] == parser.TOO_LARGE
    assert reasons["latin1"] == parser.NOT_UTF8
    assert reasons["binary"] == parser.BINARY
    if os.geteuid() != 0:
        assert reasons["secret"] == parser.UNREADABLE
    assert all(r.line == 0 for r in rejected)


def test_exactly_64_kib_is_accepted(tmp_path: Path) -> None:
    line = "k=1\n"
    (tmp_path / "f").write_text(line * (featurefile.MAX_FILE_SIZE // len(line)))
    assert scan(tmp_path)[0] == {"feature.node.kubernetes.io/k": "1"}


def test_symlinks_are_refused_wherever_they_point(tmp_path: Path) -> None:
    watched, outside = tmp_path / "d", tmp_path / "elsewhere"
    watched.mkdir()
    outside.mkdir()
    (outside / "host-secret").write_text("stolen=1\n")
    (watched / "real").write_text("inside=1\n")
    (watched / "escape").symlink_to(outside / "host-secret")
    (watched / "alias").symlink_to("real")
    got, rejected = scan(watched)
    assert got == {"feature.node.kubernetes.io/inside": "1"}
    assert [(Path(r.file).name, r.reason) for r in rejected] == [
        ("alias", parser.SYMLINK),
        ("escape", parser.SYMLINK),
    ]


def test_fifos_and_subdirectories_are_rejected_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    (tmp_path / "f").write_text("k=1\n")
    got, rejected = scan(tmp_path)
    assert got == {"feature.node.kubernetes.io/k": "1"}
    assert [(Path(r.file).name, r.reason, r.detail) for r in rejected] == [
        ("pipe", parser.NOT_A_FILE, "is a FIFO"),
        ("sub", parser.NOT_A_FILE, "is a directory"),
    ]


def test_missing_directory_gives_nothing(tmp_path: Path) -> None:
    assert scan(tmp_path / "absent") == ({}, [])


def test_directories_are_merged_in_the_order_given(tmp_path: Path) -> None:
    first, second = tmp_path / "source.d", tmp_path / "features.d"
    first.mkdir()
    second.mkdir()
    (first / "z").write_text("k=first\n")
    (second / "a").write_text("k=second\n")
    assert scan(first, second)[0] == {"feature.node.kubernetes.io/k": "second"}


def test_a_file_that_turns_bad_keeps_its_last_good_content(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    path.write_text("nvidia.com/gpu.count=2\n")
    state = FeatureState([tmp_path], Policy())
    state.rescan(NOW)
    path.write_bytes(b"nvidia.com/gpu.count=\xff\n")
    state.rescan(NOW)
    assert state.labels() == {"nvidia.com/gpu.count": "2"}
    assert [r.reason for r in state.rejected] == [parser.NOT_UTF8]
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
