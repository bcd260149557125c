"""Rescanning the feature directories and reporting what changed: each rejection, override and kept file
is logged (and counted) once when it appears, never again on later rescans that find it unchanged."""

from __future__ import annotations

import logging

from nfd_lite.features import FeatureState, now_utc
from nfd_lite.metrics import WriterMetrics

log = logging.getLogger(__name__)


class ScanReporter:
    def __init__(self, features: FeatureState, metrics: WriterMetrics) -> None:
        self.features = features
        self.metrics = metrics
        self._rejections: set[tuple[str, int, str, str]] = set()
        self._overrides: set[str] = set()
        self._kept: set[tuple[str, str]] = set()

    def rescan(self) -> None:
        state = self.features
        state.rescan(now_utc())
        seen = set()
        for r in state.rejected:
            ident = (r.file, r.line, r.key, r.reason)
            seen.add(ident)
            if ident not in self._rejections:
                self.metrics.rejected.labels(r.reason).inc()
                where = f"{r.file}:{r.line}" if r.line else r.file
                log.warning("rejected %s %s: %s (%s)", where, r.key or "-", r.reason, r.detail)
        self._rejections = seen
        overrides = {o.message() for o in state.overrides}
        for message in sorted(overrides - self._overrides):
            log.warning("%s", message)
        self._overrides = overrides
        kept = {(k.file, k.reason) for k in state.kept}
        for file, reason in sorted(kept - self._kept):
            log.warning("%s: %s; keeping its last good content", file, reason)
        self._kept = kept
        for cap, count in state.capped.items():
            self.metrics.capped.labels(cap).set(count)
