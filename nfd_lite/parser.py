"""NFD feature files -> candidate labels, with every rejected line explained.

The line format is ``featurefile``'s (upstream NFD's ``local`` source); features whose ``+expiry-time`` is
past are dropped. As upstream, files whose name starts with ``.`` are ignored (editors and atomic writers
use them as temp files), and files are read in name order, a later file overriding an earlier one.

Every byte here comes from whoever can write the feature directory, so reading is defensive: a directory
is opened without following a symlink, each file relative to it without following one either (symlinks are
refused), only regular files are read, a line without its newline is a writer mid-write and is not used, a
file that changes while read is read again, and sizes and counts are capped. Nothing read from a file is
ever logged except keys and file names, escaped and shortened by ``printable``.
"""

from __future__ import annotations

import errno
import heapq
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import featurefile
import k8slabels
from featurefile import MAX_FILE_SIZE

log = logging.getLogger(__name__)

READ_ATTEMPTS = 3  # a file still changing after this many reads keeps its last good content
SHOWN_CHARS = 100  # keys and file names in logs and rejections are cut to this many characters
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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
DIR_SYMLINK = "dir-is-symlink"
DIR_UNREADABLE = "dir-unreadable"
UNTERMINATED = "unterminated-line"
BAD_DIRECTIVE = "bad-directive"
INVALID_KEY = "invalid-key"
INVALID_VALUE = "invalid-value"
TOO_MANY_FILES = "too-many-files"
DIR_TOO_LARGE = "dir-too-large"
TOO_MANY_REJECTIONS = "too-many-rejections"


@dataclass(frozen=True)
class Limits:
    """Caps on what one scan reads and keeps, so a flooded directory costs bounded memory, log lines and
    API bytes. Files are taken in name order; what is over a cap is dropped with one rejection."""

    max_files: int = 1000  # files read per directory
    max_bytes: int = 128 * 1024  # bytes read per directory (sum of the files' sizes)
    max_labels: int = 1000  # labels on the Node
    max_owned_bytes: int = 64 * 1024  # the ownership annotation (Kubernetes allows 256 KiB of annotations)
    max_rejections: int = 100  # rejections kept per scan (and per file); the rest are counted in one


def printable(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` safe for one log line: control, non-ASCII and undecodable characters as escapes (so a
    newline in a file name cannot forge a log line), cut to ``limit`` characters."""
    shown = text[:limit].encode("unicode_escape", "backslashreplace").decode("ascii")
    return shown if len(text) <= limit else f"{shown}...({len(text)} chars)"


def show_path(directory: Path, name: str) -> str:
    return f"{printable(str(directory), 4 * SHOWN_CHARS)}/{printable(name)}"


@dataclass(frozen=True)
class Rejection:
    """A rejected line (``line`` > 0) or file (0) or directory (0, ``file`` the directory). ``file`` and
    ``key`` are already escaped; nothing else read from the file is kept."""

    file: str
    line: int
    key: str
    reason: str  # one of the reason codes above or in nfd_lite.policy
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "key": self.key,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Feature:
    key: str
    value: str
    file: str  # escaped, for messages
    line: int
    expires: datetime | None = None


@dataclass(frozen=True)
class Expired:
    """A line dropped because its +expiry-time had passed when read."""

    file: str
    line: int
    key: str

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "key": self.key}


@dataclass
class FileResult:
    """One file's features (key -> Feature) and rejections; ``ok`` False when rejected whole."""

    path: str  # the raw path: the file's identity between scans
    features: dict[str, Feature] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    expired: list[Expired] = field(default_factory=list)
    ok: bool = True
    size: int = 0  # bytes read


def _key_problem(key: str) -> str | None:
    """k8slabels' verdict, worded without the key itself (the caller shows it escaped)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (problem := k8slabels.prefix_problem(prefix)):
        return f"invalid key: {problem}"
    if problem := k8slabels.name_problem(name):
        return f"invalid key: {problem}"
    return None


def parse_text(
    text: str,
    path: str,
    now: datetime,
    max_rejections: int = Limits.max_rejections,
    shown: str | None = None,
) -> FileResult:
    """Parse one file's text (``path``: the raw path, ``shown``: it escaped). Keys and values are checked
    by the Kubernetes label rules here; the key policy is applied later, on the merged result."""
    shown = shown if shown is not None else printable(path)
    result = FileResult(path, size=len(text))
    over: list[int] = []  # line numbers of rejections not listed

    def reject(number: int, key: str, reason: str, detail: str) -> None:
        if len(result.rejected) < max_rejections:
            result.rejected.append(Rejection(shown, number, printable(key), reason, detail))
        else:
            over.append(number)

    expires: datetime | None = None
    skip_label = False
    lines = text.split("\n")
    if lines[-1].strip():  # no newline at the end: the writer may be mid-write, so never half a line
        reject(len(lines), "", UNTERMINATED, "last line has no newline; ignored until it is complete")
    for number, raw in enumerate(lines[:-1], start=1):
        parsed = featurefile.parse_line(raw)
        if parsed is None:
            continue
        if isinstance(parsed, featurefile.Directive):
            if parsed.name == featurefile.EXPIRY_TIME:
                when = featurefile.parse_expiry(parsed.value) if parsed.value is not None else None
                if when is None:
                    reject(number, "", BAD_DIRECTIVE, "expiry-time is not an RFC 3339 time")
                else:
                    expires = when
            elif parsed.name == featurefile.NO_LABEL:
                skip_label = True
            elif parsed.name != featurefile.NO_FEATURE:
                reject(number, "", BAD_DIRECTIVE, "unknown directive")
            continue
        key, value = parsed.key, parsed.value
        if expires is not None and expires <= now:
            if len(result.expired) < max_rejections:
                result.expired.append(Expired(shown, number, printable(key)))
            continue  # as upstream: an expired line does not consume a pending +no-label
        skip, skip_label = skip_label, False  # the directive covers this one feature only
        if skip:
            result.features.pop(key, None)
            continue
        if problem := _key_problem(key):
            reject(number, key, INVALID_KEY, problem)
            continue
        if problem := k8slabels.value_problem(value):
            reject(number, key, INVALID_VALUE, problem)  # the value itself is never shown
            continue
        result.features[key] = Feature(key, value, shown, number, expires)
    if over:
        detail = f"{len(over)} more rejected lines in this file, from this line on"
        result.rejected.append(Rejection(shown, min(over), "", TOO_MANY_REJECTIONS, detail))
    return result


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symlink",
}


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
    dir_fd: int, name: str, directory: Path, now: datetime, max_rejections: int
) -> FileResult | None:
    """Read and parse the file ``name`` of the directory open as ``dir_fd``; None when it vanished.
    Never follows a symlink, never blocks on a FIFO, never raises for anything the directory holds."""
    path = str(directory / name)

    def whole(reason: str, detail: str) -> FileResult:
        rejection = Rejection(show_path(directory, name), 0, "", reason, detail)
        return FileResult(path, rejected=[rejection], ok=False)

    try:
        # Type check first so a device node is never even opened; the fstat after the open settles races.
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return whole(SYMLINK, "is a symlink; symlinks in a feature directory are not followed")
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
            return whole(SYMLINK, "is a symlink; symlinks in a feature directory are not followed")
        return whole(UNREADABLE, os.strerror(err.errno) if err.errno else type(err).__name__)
    if b"\0" in data:
        return whole(BINARY, "contains NUL bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return whole(NOT_UTF8, f"not UTF-8 at byte {err.start}")
    result = parse_text(text, path, now, max_rejections, show_path(directory, name))
    result.size = len(data)
    return result


@dataclass
class Scan:
    """What one scan of all directories found. ``capped`` counts what each cap dropped (files, bytes)."""

    results: list[FileResult] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    capped: dict[str, int] = field(default_factory=lambda: {"files": 0, "bytes": 0})


def _open_directory(directory: Path) -> int | Rejection | None:
    """An fd of the directory itself (never of what a symlink points at); None when it does not exist."""
    shown = printable(str(directory), 4 * SHOWN_CHARS)
    try:
        return os.open(directory, _DIR_FLAGS)
    except FileNotFoundError:
        return None  # not created yet: waited for, not an error
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.ENOTDIR and directory.is_symlink()):
            detail = "is a symlink; refusing to follow it (give the real directory)"
            return Rejection(shown, 0, "", DIR_SYMLINK, detail)
        detail = os.strerror(err.errno) if err.errno else type(err).__name__
        return Rejection(shown, 0, "", DIR_UNREADABLE, detail)


def _names(dir_fd: int, counter: list[int]) -> Iterator[str]:
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if not entry.name.startswith("."):
                counter[0] += 1
                yield entry.name


def scan(directories: list[Path], now: datetime, limits: Limits | None = None) -> Scan:
    """Every file of every directory, directories in the order given, files in name order, within caps."""
    limits = limits or Limits()
    found = Scan()
    for directory in directories:
        opened = _open_directory(directory)
        if opened is None:
            continue
        if isinstance(opened, Rejection):
            found.rejected.append(opened)
            continue
        try:
            _scan_directory(opened, directory, now, limits, found)
        finally:
            os.close(opened)
    return found


def _scan_directory(dir_fd: int, directory: Path, now: datetime, limits: Limits, found: Scan) -> None:
    shown = printable(str(directory), 4 * SHOWN_CHARS)
    counter = [0]
    try:
        # Only the first max_files names are ever held: a directory flooded with entries costs no memory.
        names = heapq.nsmallest(limits.max_files, _names(dir_fd, counter))
    except OSError as err:
        detail = os.strerror(err.errno) if err.errno else type(err).__name__
        found.rejected.append(Rejection(shown, 0, "", DIR_UNREADABLE, detail))
        return
    if counter[0] > len(names):
        dropped = counter[0] - len(names)
        found.capped["files"] += dropped
        detail = f"{dropped} files after the first {limits.max_files} (in name order) not read"
        found.rejected.append(Rejection(shown, 0, "", TOO_MANY_FILES, detail))
    used = 0
    for index, name in enumerate(names):
        result = read_file(dir_fd, name, directory, now, limits.max_rejections)
        if result is None:
            continue
        if used + result.size > limits.max_bytes:
            left = len(names) - index
            found.capped["bytes"] += left
            detail = (
                f"{left} files from {printable(name)} on not used: the directory holds more than "
                f"{limits.max_bytes} bytes of feature files"
            )
            found.rejected.append(Rejection(shown, 0, "", DIR_TOO_LARGE, detail))
            return
        used += result.size
        found.results.append(result)


@dataclass
class Merged:
    features: dict[str, Feature]
    rejected: list[Rejection]
    overrides: list[Override]


@dataclass(frozen=True)
class Override:
    """``key`` from ``file``:``line`` replaces the one from ``old_file``:``old_line`` (files escaped)."""

    key: str
    file: str
    line: int
    old_file: str
    old_line: int

    def message(self) -> str:
        return f"{self.file}:{self.line} overrides {printable(self.key)} from {self.old_file}:{self.old_line}"


def merge(results: list[FileResult]) -> Merged:
    """Later files override earlier ones; each override is reported (the caller logs it once per change)."""
    features: dict[str, Feature] = {}
    rejected: list[Rejection] = []
    overrides: list[Override] = []
    for result in results:
        rejected.extend(result.rejected)
        for key, feature in result.features.items():
            old = features.get(key)
            if old is not None and old.file != feature.file:
                overrides.append(Override(key, feature.file, feature.line, old.file, old.line))
            features[key] = feature
    return Merged(features, rejected, overrides)
