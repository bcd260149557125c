"""The output stage: labels as an NFD feature file.

NFD's local source reads ``key=value`` lines and ``#`` comments, and honours a
``# +expiry-time=<RFC3339>`` directive for the lines after it, so the labels of
a daemon that died go away on their own. Lines are sorted so that equal label
sets give byte-equal files, and the file is replaced atomically so a reader
never sees half of it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from gfd import __version__

HEADER = (
    f"# Written by gfd {__version__} (GPU feature discovery). Rewritten when the GPUs change; do not edit."
)
EXPIRY_DIRECTIVE = "# +expiry-time="
FILE_MODE = 0o644  # readable by the label writer, whatever user it runs as


def format_expiry(expiry: datetime) -> str:
    """RFC3339 in UTC with whole seconds, as NFD parses it: 2026-12-02T18:00:00Z."""
    return expiry.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(labels: Mapping[str, str], expiry: datetime | None) -> str:
    """The feature file's text: header, expiry directive first (it applies to the lines after it), labels."""
    lines = [HEADER]
    if expiry is not None:
        lines.append(EXPIRY_DIRECTIVE + format_expiry(expiry))
    lines.extend(f"{key}={labels[key]}" for key in sorted(labels))
    return "\n".join(lines) + "\n"


def parse(text: str) -> tuple[dict[str, str], datetime | None]:
    """Labels and expiry in a feature file's text: the inverse of ``render``, ignoring other comments."""
    labels: dict[str, str] = {}
    expiry: datetime | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(EXPIRY_DIRECTIVE):
            try:
                expiry = datetime.fromisoformat(line[len(EXPIRY_DIRECTIVE) :].strip().replace("Z", "+00:00"))
            except ValueError:
                expiry = None
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            labels[key] = value
    return labels, expiry


def read_feature_file(path: str | Path) -> tuple[dict[str, str], datetime | None] | None:
    """What a feature file holds now, or None when it does not exist or cannot be read."""
    try:
        return parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def write_feature_file(path: str | Path | None, labels: Mapping[str, str], expiry: datetime | None) -> bool:
    """Write the feature file; return True if its content changed.

    ``path`` None, empty or ``-`` means standard output (always counts as changed).
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
