"""The desired labels of the feature directories: scan, keep last good per file, merge, apply policy, cap."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from nfd_lite.labelline import Expired, FileResult, LabelLine
from nfd_lite.limits import Limits
from nfd_lite.merge import Override, merge
from nfd_lite.policy import Policy
from nfd_lite.rejections import TOO_MANY_REJECTIONS, Rejection, printable
from nfd_lite.scan import scan

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


def bounded(rejected: list[Rejection], limit: int) -> list[Rejection]:
    """The first ``limit`` rejections, plus the per-file summaries, plus one line counting the rest."""
    kept: list[Rejection] = []
    listed = left = 0
    for rejection in rejected:
        if rejection.reason == TOO_MANY_REJECTIONS:
            kept.append(rejection)
        elif listed < limit:
            kept.append(rejection)
            listed += 1
        else:
            left += 1
    if left:
        kept.append(Rejection("-", 0, "", TOO_MANY_REJECTIONS, f"{left} more rejections not listed"))
    return kept


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
        found = scan(self.directories, now, self.limits)
        used: list[FileResult] = []
        kept: list[Rejection] = []
        for result in found.results:
            if result.ok:
                self._last_good[result.path] = result
                used.append(result)
                continue
            previous = self._last_good.get(result.path)
            if previous is not None:
                kept.append(result.rejected[0])
                live = {
                    k: ln for k, ln in previous.label_lines.items() if ln.expires is None or ln.expires > now
                }
                used.append(replace(previous, label_lines=live, rejected=result.rejected))
            else:
                used.append(result)
        present = {result.path for result in found.results}
        self._last_good = {path: good for path, good in self._last_good.items() if path in present}
        merged = merge(used)
        allowed, denied = self.policy.filter(merged.label_lines)
        self.label_lines, over, capped = cap_labels(allowed, self.limits)
        rejected = sorted(found.rejected + merged.rejected + denied + over, key=lambda r: (r.file, r.line))
        self.rejected = bounded(rejected, self.limits.max_rejections)
        limit = self.limits.max_rejections
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
