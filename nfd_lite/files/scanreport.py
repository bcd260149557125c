"""Rescanning the feature directories and reporting what changed: each rejection, override and kept file
is logged (and counted) once when it appears, never again on later rescans that find it unchanged."""

from __future__ import annotations

import logging

from nfd_lite.files.features import FeatureState, now_utc
from nfd_lite.files.rejections import Rejection
from nfd_lite.metrics import WriterMetrics
from saidonce import SaidOnce

log = logging.getLogger(__name__)


def _rejection(r: Rejection) -> tuple[str, int, str, str]:
    """What makes a rejection the same one on the next rescan: its detail may differ."""
    return r.file, r.line, r.key, r.reason


class ScanReporter:
    def __init__(self, features: FeatureState, metrics: WriterMetrics) -> None:
        self.features = features
        self.metrics = metrics
        self._rejections: SaidOnce[tuple[str, int, str, str]] = SaidOnce()
        self._overrides: SaidOnce[str] = SaidOnce()
        self._kept: SaidOnce[tuple[str, str]] = SaidOnce()

    def rescan(self) -> None:
        state = self.features
        state.rescan(now_utc())
        new = set(self._rejections.update(map(_rejection, state.rejected)).new)
        for r in state.rejected:
            if _rejection(r) in new:
                self.metrics.rejected.labels(r.reason).inc()
                where = f"{r.file}:{r.line}" if r.line else r.file
                log.warning("rejected %s %s: %s (%s)", where, r.key or "-", r.reason, r.detail)
        for message in self._overrides.update(sorted(o.message() for o in state.overrides)).new:
            log.warning("%s", message)
        for file, reason in self._kept.update(sorted((k.file, k.reason) for k in state.kept)).new:
            log.warning("%s: %s; keeping its last good content", file, reason)
        for cap, count in state.capped.items():
            self.metrics.capped.labels(cap).set(count)
