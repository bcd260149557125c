"""Reading one feature file with real files: a bad file is rejected whole, with why, and never followed."""

from __future__ import annotations

import os
from pathlib import Path

import featurefile
from nfd_lite.files import readfile
from tests.nfd_lite.reading import read_dirs


def test_a_bad_file_is_rejected_whole_and_the_others_still_apply(tmp_path: Path) -> None:
    (tmp_path / "big").write_text("k=1\n" * 20000)
    (tmp_path / "latin1").write_bytes(b"k=caf\xe9\n")
    (tmp_path / "binary").write_bytes(b"k=1\n\0\0\0")
    (tmp_path / "good").write_text("nvidia.com/gpu.ok=yes\n")
    if os.geteuid() != 0:  # root reads mode-000 files anyway
        unreadable = tmp_path / "secret"
        unreadable.write_text("k=1\n")
        unreadable.chmod(0)
    got, rejected = read_dirs(tmp_path)
    assert got == {"nvidia.com/gpu.ok": "yes"}
    reasons = {Path(r.file).name: r.reason for r in rejected}
    assert reasons["big"] == readfile.TOO_LARGE
    assert reasons["latin1"] == readfile.NOT_UTF8
    assert reasons["binary"] == readfile.BINARY
    if os.geteuid() != 0:
        assert reasons["secret"] == readfile.UNREADABLE
    assert all(r.line == 0 for r in rejected)


def test_exactly_64_kib_is_accepted(tmp_path: Path) -> None:
    line = "k=1\n"
    (tmp_path / "f").write_text(line * (featurefile.MAX_FILE_SIZE // len(line)))
    assert read_dirs(tmp_path)[0] == {"feature.node.kubernetes.io/k": "1"}


def test_symlinks_are_refused_wherever_they_point(tmp_path: Path) -> None:
    watched, outside = tmp_path / "d", tmp_path / "elsewhere"
    watched.mkdir()
    outside.mkdir()
    (outside / "host-secret").write_text("stolen=1\n")
    (watched / "real").write_text("inside=1\n")
    (watched / "escape").symlink_to(outside / "host-secret")
    (watched / "alias").symlink_to("real")
    got, rejected = read_dirs(watched)
    assert got == {"feature.node.kubernetes.io/inside": "1"}
    assert [(Path(r.file).name, r.reason) for r in rejected] == [
        ("alias", readfile.SYMLINK),
        ("escape", readfile.SYMLINK),
    ]


def test_fifos_and_subdirectories_are_rejected_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    (tmp_path / "f").write_text("k=1\n")
    got, rejected = read_dirs(tmp_path)
    assert got == {"feature.node.kubernetes.io/k": "1"}
    assert [(Path(r.file).name, r.reason, r.detail) for r in rejected] == [
        ("pipe", readfile.NOT_A_FILE, "is a FIFO"),
        ("sub", readfile.NOT_A_FILE, "is a directory"),
    ]
