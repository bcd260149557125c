"""The desired labels of the feature directories: scan, keep last good per file, merge, apply policy, cap."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from nfd_lite.files.labelline import Expired, FileResult, LabelLine
from nfd_lite.files.limits import Limits, ScanBudget
from nfd_lite.files.merge import Override, merge
from nfd_lite.files.policy import Policy
from nfd_lite.files.rejections import TOO_MANY_REJECTIONS, Rejection, printable
from nfd_lite.files.scan import scan

TOO_MANY_LABELS = "too-many-labels"
OWNED_TOO_LARGE = "owned-annotation-full"
CAPS = ("files", "bytes", "labels", "owned-annotation")  # the values of the capped metric's "cap" label


def now_utc() -> datetime:
    """The clock that +expiry-time is compared with."""
    return datetime.now(UTC)


def cap_labels(
    label_lines: dict[str, LabelLine], limits: Limits
) -> tuple[dict[str, LabelLine], list[Rejection], dict[str, int]]:
    """At most ``max_labels`` labels whose keys fit the ownership annotation, in key order; the rest are
    dropped with one rejection naming the first of them."""
    kept: dict[str, LabelLine] = {}
    used = -1  # the annotation is the keys joined by ","
    keys = sorted(label_lines)
    for index, key in enumerate(keys):
        over_count = len(kept) >= limits.max_labels
        if over_count or used + 1 + len(key) > limits.max_owned_bytes:
            first = label_lines[key]
            left = len(keys) - index
            if over_count:
                reason, cap = TOO_MANY_LABELS, "labels"
                detail = (
                    f"{left} labels over the cap of {limits.max_labels} not written (this key on, by key)"
                )
            else:
                reason, cap = OWNED_TOO_LARGE, "owned-annotation"
                detail = (
                    f"{left} labels not written: their keys would make the ownership annotation larger than "
                    f"{limits.max_owned_bytes} bytes (this key on, in key order)"
                )
            return kept, [Rejection(first.file, first.line, printable(key), reason, detail)], {cap: left}
        used += 1 + len(key)
        kept[key] = label_lines[key]
    return kept, [], {}


def bounded(rejected: list[Rejection], limit: int, unlisted: int = 0) -> list[Rejection]:
    """The first ``limit`` rejections, plus one line counting the rest and the ``unlisted`` ones a scan's
    budget only counted: one cap over all files and directories."""
    left = max(0, len(rejected) - limit) + unlisted
    kept = rejected[:limit]
    if left:
        kept.append(Rejection("-", 0, "", TOO_MANY_REJECTIONS, f"{left} more rejections not listed"))
    return kept


def _live(previous: FileResult, now: datetime, rejected: list[Rejection]) -> FileResult:
    """A file's last good content as it counts ``now``: without the lines expired since."""
    live = {k: ln for k, ln in previous.label_lines.items() if ln.expires is None or ln.expires > now}
    return replace(previous, label_lines=live, rejected=rejected)


class FeatureState:
    """What the files say, as of the last ``rescan``.

    A file that becomes unreadable or invalid keeps contributing its last good content (a read error
    must not make labels flap); a file that is deleted stops contributing. Everything worth a warning is
    exposed as data (``rejected``, ``overrides``, ``kept``), so the caller can report each once per change.

    +expiry-time is applied here, when the files are read, as upstream NFD does: the parser drops a line
    whose time has passed, and last good content is held to the same clock. So what ``labels`` returns
    holds until ``next_expiry``, when the files must be read again (a line an expired one overrode then
    counts again).
    """

    def __init__(self, directories: list[Path], policy: Policy, limits: Limits | None = None) -> None:
        self.directories = directories
        self.policy = policy
        self.limits = limits or Limits()
        self.label_lines: dict[str, LabelLine] = {}
        self.rejected: list[Rejection] = []
        self.overrides: list[Override] = []
        self.expired: list[Expired] = []
        self.kept: list[Rejection] = []  # whole-file rejections answered with the file's last good content
        self.capped: dict[str, int] = dict.fromkeys(CAPS, 0)
        self.files_seen = False
        self._last_good: dict[str, FileResult] = {}

    def rescan(self, now: datetime) -> None:
        budget = ScanBudget.of(self.limits)
        found = scan(self.directories, now, self.limits, budget)
        used: list[FileResult] = []
        kept: list[Rejection] = []
        last_good: dict[str, FileResult] = {}
        by_directory: dict[str, list[FileResult]] = {}
        for result in found.results:
            by_directory.setdefault(os.path.dirname(result.path), []).append(result)
        for directory in dict.fromkeys(self.directories):
            failure = found.failed.get(directory)
            if failure is not None:  # unreadable: what it held is unknown, so its last good content stays
                held = sorted(p for p in self._last_good if os.path.dirname(p) == str(directory))
                kept += [failure] if held else []
                for path in held:
                    last_good[path] = self._last_good[path]
                    used.append(_live(last_good[path], now, []))
                continue
            for result in by_directory.get(str(directory), []):
                previous = self._last_good.get(result.path)
                if result.ok:
                    # Kept without its rejections: each scan lists its own, within its own budget.
                    last_good[result.path] = replace(result, rejected=[], expired=[])
                    used.append(result)
                elif previous is not None:
                    kept.append(result.rejected[0])
                    last_good[result.path] = previous
                    used.append(_live(previous, now, result.rejected))
                else:
                    used.append(result)
        self._last_good = last_good
        merged = merge(used)
        allowed, denied = self.policy.filter(merged.label_lines)
        self.label_lines, over, capped = cap_labels(allowed, self.limits)
        rejected = sorted(found.rejected + merged.rejected + denied + over, key=lambda r: (r.file, r.line))
        limit = self.limits.max_rejections
        self.rejected = bounded(rejected, limit, budget.rejections.over)
        self.overrides = merged.overrides[:limit]
        self.expired = [e for result in used for e in result.expired][:limit]
        self.kept = kept[:limit]
        self.capped = dict.fromkeys(CAPS, 0) | found.capped | capped
        self.files_seen = self.files_seen or bool(found.results)

    def labels(self) -> dict[str, str]:
        """The labels the files gave at the last ``rescan``, by key."""
        return {key: label_line.value for key, label_line in sorted(self.label_lines.items())}

    def next_expiry(self) -> datetime | None:
        """The soonest +expiry-time of a label held: the files must be read again then."""
        return min(
            (line.expires for line in self.label_lines.values() if line.expires is not None), default=None
        )
