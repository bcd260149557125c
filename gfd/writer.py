"""The output stage: labels as an NFD feature file (the format is ``featurefile``'s).

The file carries an ``+expiry-time``, so the labels of a daemon that died go
away on their own, and is replaced atomically so a reader never sees half of it.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import featurefile
from gfd import __version__

HEADER = f"Written by gfd {__version__} (GPU feature discovery). Rewritten when the GPUs change; do not edit."
FILE_MODE = 0o644  # readable by the label writer, whatever user it runs as


def render(labels: Mapping[str, str], expiry: datetime | None) -> str:
    """gfd's feature file: the header naming its writer, then the expiry and the labels."""
    return featurefile.render(labels, expiry, comment=HEADER)


def parse(text: str) -> tuple[dict[str, str], datetime | None]:
    """Labels and expiry in a feature file's text: the inverse of ``render``, ignoring other comments and
    directives (gfd writes neither)."""
    labels: dict[str, str] = {}
    expiry: datetime | None = None
    for line in text.split("\n"):
        parsed = featurefile.parse_line(line)
        if isinstance(parsed, featurefile.Entry):
            labels[parsed.key] = parsed.value
        elif isinstance(parsed, featurefile.Directive) and parsed.name == featurefile.EXPIRY_TIME:
            expiry = featurefile.parse_expiry(parsed.value) if parsed.value is not None else None
    return labels, expiry


def read_feature_file(path: str | Path) -> tuple[dict[str, str], datetime | None] | None:
    """What a feature file holds now, or None when it does not exist or cannot be read."""
    try:
        return parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


class FeatureFile:
    """The feature file and what it holds, as last read or written: what lets the daemon leave an
    up-to-date file alone, across its own restarts too. ``path`` None means standard output."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = path
        existing = read_feature_file(path) if path is not None else None
        self.labels: dict[str, str] | None = existing[0] if existing is not None else None
        self.expiry: datetime | None = existing[1] if existing is not None else None

    def write(self, labels: Mapping[str, str], expiry: datetime | None) -> bool:
        """Write the file (see ``write_feature_file``); True if its content changed."""
        changed = write_feature_file(self.path, labels, expiry)
        self.labels, self.expiry = dict(labels), expiry
        return changed


def write_feature_file(path: str | Path | None, labels: Mapping[str, str], expiry: datetime | None) -> bool:
    """Write the feature file; return True if its content changed.

    ``path`` None, empty or ``-`` means standard output (always counts as changed); so does a path that
    exists and is no regular file (``/dev/null``, a FIFO, a terminal), which is written into, not replaced:
    renaming over it would put a regular file in place of the device, for every program on the host.
    The file is only touched when its content would differ, and then replaced
    atomically: a temporary file with a random name starting with ``.`` in the
    same directory (NFD skips dot files), fsync, rename over the target, fsync
    the directory so the rename survives a crash.
    """
    text = render(labels, expiry)
    if path is None or str(path) in ("", "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    target = Path(path)
    try:
        special = not stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        special = False  # missing (or unreadable): written as a new file
    if special:
        with open(target, "w", encoding="utf-8") as out:
            out.write(text)
        return True
    try:
        if target.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: write it
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    # A fresh random name made with O_EXCL|O_NOFOLLOW: whoever else can write this directory cannot
    # make gfd write through a link or into a file planted under a name it could guess.
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    tmp = Path(name)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return True


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # some filesystems do not open directories; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
