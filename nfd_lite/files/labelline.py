"""One feature file's text -> its label lines, with every rejected line explained.

The line format is ``featurefile``'s (upstream NFD's ``local`` source); lines whose ``+expiry-time`` is
past are dropped. A line without its newline is a writer mid-write and is not used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import featurefile
import k8slabels
from nfd_lite.files.limits import Limits, ScanBudget
from nfd_lite.files.rejections import Rejection, printable, show_invalid_key

# Reason codes (also the values of the rejected-lines metric's "reason" label).
UNTERMINATED = "unterminated-line"
BAD_DIRECTIVE = "bad-directive"
INVALID_KEY = "invalid-key"
INVALID_VALUE = "invalid-value"


@dataclass(frozen=True, slots=True)
class LabelLine:
    """One label line of a feature file: the label it asks for, where it is, and until when it holds."""

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
    """One file's label lines (key -> LabelLine) and rejections; ``ok`` False when rejected whole."""

    path: str  # the raw path: the file's identity between scans
    label_lines: dict[str, LabelLine] = field(default_factory=dict)
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
    budget: ScanBudget | None = None,
    shown: str | None = None,
) -> FileResult:
    """Parse one file's text (``path``: the raw path, ``shown``: it escaped). Keys and values are checked
    by the Kubernetes label rules here; the key policy is applied later, on the merged result. Rejected and
    expired lines are listed while ``budget`` (the scan's, shared by all its files) lasts, and only counted
    after that."""
    shown = shown if shown is not None else printable(path)
    budget = budget or ScanBudget.of(Limits())
    result = FileResult(path, size=len(text))

    def reject(number: int, key: str, reason: str, detail: str) -> None:
        if budget.rejections.take():
            result.rejected.append(Rejection(shown, number, key, reason, detail))

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
            if budget.expired.take():
                result.expired.append(Expired(shown, number, printable(key)))
            continue  # as upstream: an expired line does not consume a pending +no-label
        skip, skip_label = skip_label, False  # the directive covers this one line only
        if skip:
            result.label_lines.pop(key, None)
            continue
        if problem := _key_problem(key):
            # A line without "=" is a key as a whole (as upstream), so an invalid one may hold anything.
            reject(number, show_invalid_key(key), INVALID_KEY, problem)
            continue
        if problem := k8slabels.value_problem(value):
            reject(number, printable(key), INVALID_VALUE, problem)  # the value itself is never shown
            continue
        result.label_lines[key] = LabelLine(key, value, shown, number, expires)
    return result
