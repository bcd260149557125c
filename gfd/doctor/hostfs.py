"""Small readers for files under the host root; every one answers None instead of raising."""

from __future__ import annotations

from pathlib import Path


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_hex(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None
