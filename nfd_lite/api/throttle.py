"""A token bucket on the writer's PATCHes: a feature file that flips every few milliseconds must not turn
into tens of writes a second at the API server (every write also reaches every watcher of Nodes)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``burst`` writes at once, then ``rate`` a second on average. Not thread-safe: only the main loop
    writes."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs a rate above 0 and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def delay(self) -> float:
        """Seconds until a write may be sent (0 when one may be sent now)."""
        self._refill()
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        """One write is being sent (the caller waited out ``delay`` first)."""
        self._refill()
        self._tokens = max(0.0, self._tokens - 1.0)
