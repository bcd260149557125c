"""When the feature file's ``+expiry-time`` is set, and when it must be pushed forward."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class ExpiryPolicy:
    span: timedelta | None  # how far ahead labels expire; None: they never do
    interval: timedelta | None  # the sleep interval between passes; None: infinite

    def expiry_at(self, now: datetime) -> datetime | None:
        """The expiry for a file written ``now`` (whole seconds, as the file holds it)."""
        return (now + self.span).replace(microsecond=0) if self.span is not None else None

    def due(self, expiry: datetime | None, now: datetime) -> bool:
        """Whether a file expiring at ``expiry`` must be rewritten ``now`` for its expiry alone."""
        if self.span is None:
            return expiry is not None  # drop a stale directive
        if expiry is None:
            return True
        # Once half of it is used up, and always before the next pass could find it lapsed; with the
        # default (3 intervals) that is one write every other pass.
        threshold = self.span / 2 if self.interval is None else max(self.span / 2, self.interval * 1.5)
        return expiry - now < threshold
