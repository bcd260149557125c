"""Reading one feature file of an open directory, as defensively as its untrusted writer requires.

Each file is opened relative to its directory without following a symlink (symlinks are refused), only
regular files are read, a FIFO cannot block the reader, a file that changes while read is read again,
and its size is capped. What it holds is then parsed by ``labelline``.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import datetime
from pathlib import Path

from featurefile import MAX_FILE_SIZE
from nfd_lite.files.labelline import FileResult, parse_text
from nfd_lite.files.limits import ScanBudget
from nfd_lite.files.rejections import Rejection, show_path

READ_ATTEMPTS = 3  # a file still changing after this many reads keeps its last good content
# O_NONBLOCK: a FIFO swapped in after the type check cannot hang the reader; O_NOCTTY: nor become its tty.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

# Reason codes (also the values of the rejected-lines metric's "reason" label).
TOO_LARGE = "file-too-large"
UNREADABLE = "unreadable"
NOT_UTF8 = "not-utf8"
BINARY = "binary"
SYMLINK = "symlink"
NOT_A_FILE = "not-a-file"
CHANGING = "changing"

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symlink",
}
_IS_A_SYMLINK = "is a symlink; symlinks in a feature directory are not followed"


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _identity(info: os.stat_result) -> tuple[int, int, int, int, int]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class _Whole(Exception):
    """The file is rejected whole: (reason, detail)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


def _read_stable(fd: int) -> bytes:
    """The whole file, read again while it changes under the reader (size, times or inode differ before
    and after, or fewer bytes came than it had)."""
    for _ in range(READ_ATTEMPTS):
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise _Whole(NOT_A_FILE, f"is {_kind(before.st_mode)}")
        if before.st_size > MAX_FILE_SIZE:
            raise _Whole(TOO_LARGE, f"{before.st_size} bytes, more than {MAX_FILE_SIZE}")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_SIZE:
            chunk = os.pread(fd, MAX_FILE_SIZE + 1 - size, size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_SIZE:  # grew past the limit while read
            raise _Whole(TOO_LARGE, f"more than {MAX_FILE_SIZE} bytes")
        if _identity(os.fstat(fd)) == _identity(before) and size == before.st_size:
            return b"".join(chunks)
    raise _Whole(CHANGING, f"still changing after {READ_ATTEMPTS} reads; read again on the next event")


def read_file(
    dir_fd: int, name: str, directory: Path, now: datetime, budget: ScanBudget
) -> FileResult | None:
    """Read and parse the file ``name`` of the directory open as ``dir_fd``; None when it vanished.
    Never follows a symlink, never blocks on a FIFO, never raises for anything the directory holds. A file
    rejected whole always carries its one rejection (the caller needs it to keep the file's last good
    content); its lines' rejections are listed within the scan's ``budget``."""
    path = str(directory / name)

    def whole(reason: str, detail: str) -> FileResult:
        rejection = Rejection(show_path(directory, name), 0, "", reason, detail)
        return FileResult(path, rejected=[rejection], ok=False)

    try:
        # Type check first so a device node is never even opened; the fstat after the open settles races.
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return whole(SYMLINK, _IS_A_SYMLINK)
        if not stat.S_ISREG(info.st_mode):
            return whole(NOT_A_FILE, f"is {_kind(info.st_mode)}")
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        try:
            data = _read_stable(fd)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None  # vanished between listing and reading: the next event rescans
    except _Whole as err:
        return whole(err.reason, err.detail)
    except OSError as err:
        if err.errno == errno.ELOOP:  # replaced by a symlink after the type check
            return whole(SYMLINK, _IS_A_SYMLINK)
        return whole(UNREADABLE, os.strerror(err.errno) if err.errno else type(err).__name__)
    if b"\0" in data:
        return whole(BINARY, "contains NUL bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return whole(NOT_UTF8, f"not UTF-8 at byte {err.start}")
    result = parse_text(text, path, now, budget, show_path(directory, name))
    result.size = len(data)
    return result
