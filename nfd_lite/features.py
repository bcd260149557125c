"""The desired labels of the feature directories: scan, keep last good per file, merge, apply policy."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from nfd_lite.parser import Feature, FileResult, Rejection, merge, scan
from nfd_lite.policy import Policy

log = logging.getLogger(__name__)


class FeatureState:
    """What the files say, as of the last ``rescan``.

    A file that becomes unreadable or invalid keeps contributing its last good content (a read error
    must not make labels flap); a file that is deleted stops contributing.
    """

    def __init__(self, directories: list[Path], policy: Policy) -> None:
        self.directories = directories
        self.policy = policy
        self.features: dict[str, Feature] = {}
        self.rejected: list[Rejection] = []
        self.files_seen = False
        self._last_good: dict[str, FileResult] = {}

    def rescan(self, now: datetime) -> None:
        results = scan(self.directories, now)
        used: list[FileResult] = []
        for result in results:
            if result.ok:
                self._last_good[result.path] = result
                used.append(result)
                continue
            previous = self._last_good.get(result.path)
            if previous is not None:
                log.warning("%s: %s; keeping its last good content", result.path, result.rejected[0].detail)
                used.append(replace(previous, rejected=result.rejected))
            else:
                used.append(result)
        present = {result.path for result in results}
        self._last_good = {path: kept for path, kept in self._last_good.items() if path in present}
        merged = merge(used)
        self.features, denied = self.policy.filter(merged.features)
        self.rejected = sorted(merged.rejected + denied, key=lambda r: (r.file, r.line))
        self.files_seen = self.files_seen or bool(results)

    def labels(self, now: datetime) -> dict[str, str]:
        return {
            key: feature.value
            for key, feature in sorted(self.features.items())
            if feature.expires is None or feature.expires > now
        }

    def next_expiry(self, now: datetime) -> datetime | None:
        pending = [f.expires for f in self.features.values() if f.expires is not None and f.expires > now]
        return min(pending) if pending else None
