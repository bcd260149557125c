"""The feature file as NFD and a node admin see it."""

from __future__ import annotations

import os
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gfd import writer
from gfd.writer import FeatureFile, parse, read_feature_file, render, write_feature_file

EXPIRY = datetime(2026, 12, 2, 18, 30, 15, 999999, tzinfo=UTC)
LABELS = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.present": "true"}


def test_lines_are_sorted_after_a_header_and_the_expiry_directive(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    write_feature_file(path, LABELS, EXPIRY)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    assert lines[1] == "# +expiry-time=2026-12-02T18:30:15Z"
    assert lines[2:] == [
        "nvidia.com/gpu.count=2",
        "nvidia.com/gpu.present=true",
        "nvidia.com/gpu.product=Tesla-T4",
    ]


def test_expiry_in_another_time_zone_is_written_in_utc() -> None:
    tz = datetime(2026, 1, 1, 10, 0, tzinfo=UTC).astimezone().tzinfo
    local = datetime(2026, 12, 2, 18, 30, 15, tzinfo=UTC).astimezone(tz)
    assert "# +expiry-time=2026-12-02T18:30:15Z\n" in render({}, local)


def test_no_expiry_means_no_directive(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    write_feature_file(path, LABELS, None)
    assert "expiry-time" not in path.read_text()


def test_equal_label_sets_give_byte_equal_files_and_no_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    assert write_feature_file(path, LABELS, EXPIRY) is True
    before = path.stat()
    reordered = dict(reversed(list(LABELS.items())))
    assert write_feature_file(path, reordered, EXPIRY) is False
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_change_replaces_the_file_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    write_feature_file(path, LABELS, EXPIRY)
    inode = path.stat().st_ino
    assert write_feature_file(path, {**LABELS, "nvidia.com/gpu.count": "3"}, EXPIRY) is True
    assert path.stat().st_ino != inode  # a new file renamed over the old one, not rewritten in place
    assert "nvidia.com/gpu.count=3" in path.read_text()
    assert os.listdir(tmp_path) == ["gfd"]


def test_a_new_expiry_alone_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    write_feature_file(path, LABELS, EXPIRY)
    assert write_feature_file(path, LABELS, EXPIRY + timedelta(minutes=1)) is True
    assert read_feature_file(path) == (LABELS, (EXPIRY + timedelta(minutes=1)).replace(microsecond=0))


def test_a_failed_write_keeps_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gfd"
    write_feature_file(path, LABELS, EXPIRY)
    old = path.read_text()

    def no_rename(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "replace", no_rename)
    with pytest.raises(OSError):
        write_feature_file(path, {"nvidia.com/gpu.count": "9"}, EXPIRY)
    assert path.read_text() == old
    assert os.listdir(tmp_path) == ["gfd"]


def test_the_temp_file_is_a_dot_file_in_the_same_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # NFD skips dot files, and a rename within one directory is atomic.
    seen: list[Path] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append(Path(src))
        real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", spy)
    write_feature_file(tmp_path / "gfd", LABELS, EXPIRY)
    assert len(seen) == 1
    assert seen[0].parent == tmp_path
    assert seen[0].name.startswith(".")


def test_the_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "source.d" / "gfd"
    write_feature_file(path, LABELS, None)
    assert read_feature_file(path) == (LABELS, None)


@pytest.mark.parametrize("target", ["-", "", None])
def test_stdout_mode(target: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert write_feature_file(target, LABELS, None) is True
    out = capsys.readouterr().out
    assert out == render(LABELS, None)
    assert "nvidia.com/gpu.product=Tesla-T4\n" in out


def test_parse_reads_back_what_render_wrote_and_ignores_other_comments() -> None:
    text = render(LABELS, EXPIRY) + "# a note\n\n"
    assert parse(text) == (LABELS, EXPIRY.replace(microsecond=0))


def test_parse_reads_bare_keys_as_nfd_does() -> None:
    assert parse("gpu.present\n") == ({"feature.node.kubernetes.io/gpu.present": "true"}, None)


def test_a_feature_file_remembers_what_it_holds_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    assert (FeatureFile(path).labels, FeatureFile(path).expiry) == (None, None)
    written = FeatureFile(path)
    assert written.write(LABELS, EXPIRY) is True
    assert (written.labels, written.expiry) == (LABELS, EXPIRY)
    again = FeatureFile(path)  # as a restarted daemon finds it
    assert (again.labels, again.expiry) == (LABELS, EXPIRY.replace(microsecond=0))
    assert again.write(LABELS, EXPIRY) is False


def test_reading_a_missing_file_gives_none(tmp_path: Path) -> None:
    assert read_feature_file(tmp_path / "absent") is None


def test_the_file_is_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_feature_file(tmp_path / "gfd", LABELS, EXPIRY)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "gfd").stat().st_mode) == 0o644


def test_the_temp_file_has_a_random_name_made_exclusively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Names a neighbour could guess (the old ".gfd.<pid>.tmp") and plant as a link beforehand.
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / f".gfd.{os.getpid()}.tmp").symlink_to(victim)
    flags: list[int] = []
    real_open = os.open

    def spy(path: str, flag: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        flags.append(flag)
        return real_open(path, flag, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", spy)
    write_feature_file(tmp_path / "gfd", LABELS, EXPIRY)
    write_feature_file(tmp_path / "gfd", {**LABELS, "nvidia.com/gpu.count": "3"}, EXPIRY)
    assert victim.read_text() == "keep me\n"
    creations = [f for f in flags if f & os.O_CREAT]
    assert len(creations) == 2
    assert all(f & os.O_EXCL and f & os.O_NOFOLLOW for f in creations)
    assert sorted(os.listdir(tmp_path)) == [f".gfd.{os.getpid()}.tmp", "gfd", "victim"]


def test_a_device_or_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    # `gfd --oneshot -o /dev/null` as root: a rename over it would leave a regular file where the device was.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    assert write_feature_file(fifo, {"nvidia.com/gpu.present": "true"}, None)
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO
    assert received and "nvidia.com/gpu.present=true" in received[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]  # no temp file left beside it
