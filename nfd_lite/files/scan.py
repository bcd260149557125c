"""Scanning the feature directories: which files are read, in which order, within which caps.

As upstream NFD, files whose name starts with ``.`` are ignored (editors and atomic writers use them as
temp files), and files are read in name order, a later file overriding an earlier one (see ``merge``).
A directory is opened without following a symlink; each of its files is read by ``readfile``.
"""

from __future__ import annotations

import errno
import heapq
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from nfd_lite.files.labelline import FileResult
from nfd_lite.files.limits import Limits, ScanBudget
from nfd_lite.files.readfile import read_file
from nfd_lite.files.rejections import Rejection, printable, show_directory

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Reason codes (also the values of the rejected-lines metric's "reason" label).
DIR_SYMLINK = "dir-is-symlink"
DIR_UNREADABLE = "dir-unreadable"
TOO_MANY_FILES = "too-many-files"
DIR_TOO_LARGE = "dir-too-large"


@dataclass
class Scan:
    """What one scan of all directories found. ``capped`` counts what each cap dropped (files, bytes);
    ``failed`` names each directory that exists but could not be read, with its rejection (also listed in
    ``rejected``): what it held is unknown, not gone."""

    results: list[FileResult] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    capped: dict[str, int] = field(default_factory=lambda: {"files": 0, "bytes": 0})
    failed: dict[Path, Rejection] = field(default_factory=dict)

    def fail(self, directory: Path, rejection: Rejection) -> None:
        self.rejected.append(rejection)
        self.failed[directory] = rejection


def _open_directory(directory: Path) -> int | Rejection | None:
    """An fd of the directory itself (never of what a symlink points at); None when it does not exist."""
    try:
        return os.open(directory, _DIR_FLAGS)
    except FileNotFoundError:
        return None  # not created yet: waited for, not an error
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.ENOTDIR and directory.is_symlink()):
            detail = "is a symlink; refusing to follow it (give the real directory)"
            return Rejection(show_directory(directory), 0, "", DIR_SYMLINK, detail)
        detail = os.strerror(err.errno) if err.errno else type(err).__name__
        return Rejection(show_directory(directory), 0, "", DIR_UNREADABLE, detail)


def _names(dir_fd: int, counter: list[int]) -> Iterator[str]:
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if not entry.name.startswith("."):
                counter[0] += 1
                yield entry.name


def scan(
    directories: list[Path], now: datetime, limits: Limits | None = None, budget: ScanBudget | None = None
) -> Scan:
    """Every file of every directory, directories in the order given, files in name order, within caps;
    all files share one ``budget`` of listed rejections and expired lines (default: ``limits``')."""
    limits = limits or Limits()
    budget = budget or ScanBudget.of(limits)
    found = Scan()
    for directory in directories:
        opened = _open_directory(directory)
        if opened is None:
            continue
        if isinstance(opened, Rejection):
            found.fail(directory, opened)
            continue
        try:
            _scan_directory(opened, directory, now, limits, budget, found)
        finally:
            os.close(opened)
    return found


def _scan_directory(
    dir_fd: int, directory: Path, now: datetime, limits: Limits, budget: ScanBudget, found: Scan
) -> None:
    shown = show_directory(directory)
    counter = [0]
    try:
        # Only the first max_files names are ever held: a directory flooded with entries costs no memory.
        names = heapq.nsmallest(limits.max_files, _names(dir_fd, counter))
    except OSError as err:
        detail = os.strerror(err.errno) if err.errno else type(err).__name__
        found.fail(directory, Rejection(shown, 0, "", DIR_UNREADABLE, detail))
        return
    if counter[0] > len(names):
        dropped = counter[0] - len(names)
        found.capped["files"] += dropped
        detail = f"{dropped} files after the first {limits.max_files} (in name order) not read"
        found.rejected.append(Rejection(shown, 0, "", TOO_MANY_FILES, detail))
    used = 0
    for index, name in enumerate(names):
        result = read_file(dir_fd, name, directory, now, budget)
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
