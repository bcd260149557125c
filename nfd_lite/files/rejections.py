"""How input that is not used is reported: one record per rejected line, file or directory.

Every byte of a feature file comes from whoever can write the feature directory, so nothing read from a
file is ever shown except keys and file names, escaped and shortened by ``printable``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_KEY_CHARACTERS = re.compile(r"[A-Za-z0-9._/-]*")  # every character a label key may hold
SHOWN_CHARS = 100  # keys and file names in logs and rejections are cut to this many characters

# A summary standing for the rejections over a cap (also a value of the rejected-lines metric's "reason").
TOO_MANY_REJECTIONS = "too-many-rejections"


def printable(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` safe for one log line: control, non-ASCII and undecodable characters as escapes (so a
    newline in a file name cannot forge a log line), cut to ``limit`` characters."""
    shown = text[:limit].encode("unicode_escape", "backslashreplace").decode("ascii")
    return shown if len(text) <= limit else f"{shown}...({len(text)} chars)"


def show_invalid_key(key: str) -> str:
    """An invalid key as a rejection shows it: only up to the first character no label key may hold, then
    escaped and cut by ``printable``. A line without "=" is a key as a whole, so this keeps whatever else
    such a line holds (a value, a secret pasted by mistake) out of the logs."""
    head = _KEY_CHARACTERS.match(key)
    shown = head.group() if head else ""
    return printable(key) if len(shown) == len(key) else f"{printable(shown)}...({len(key)} chars)"


def show_directory(directory: Path) -> str:
    """A directory as rejections name it (directories get more room than file names)."""
    return printable(str(directory), 4 * SHOWN_CHARS)


def show_path(directory: Path, name: str) -> str:
    return f"{show_directory(directory)}/{printable(name)}"


@dataclass(frozen=True)
class Rejection:
    """A rejected line (``line`` > 0) or file (0) or directory (0, ``file`` the directory). ``file`` and
    ``key`` are already escaped; nothing else read from the file is kept."""

    file: str
    line: int
    key: str
    reason: str  # a reason code, named by the module that rejects (e.g. labelline, readfile, policy)
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "key": self.key,
            "reason": self.reason,
            "detail": self.detail,
        }
