"""Merging the files' label lines: a later file overrides an earlier one, and each override is said."""

from __future__ import annotations

from dataclasses import dataclass

from nfd_lite.files.labelline import FileResult, LabelLine
from nfd_lite.files.rejections import Rejection, printable


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


@dataclass
class Merged:
    label_lines: dict[str, LabelLine]
    rejected: list[Rejection]
    overrides: list[Override]


def merge(results: list[FileResult]) -> Merged:
    """Later files override earlier ones; each override is reported (the caller logs it once per change)."""
    label_lines: dict[str, LabelLine] = {}
    rejected: list[Rejection] = []
    overrides: list[Override] = []
    for result in results:
        rejected.extend(result.rejected)
        for key, label_line in result.label_lines.items():
            old = label_lines.get(key)
            if old is not None and old.file != label_line.file:
                overrides.append(Override(key, label_line.file, label_line.line, old.file, old.line))
            label_lines[key] = label_line
    return Merged(label_lines, rejected, overrides)
