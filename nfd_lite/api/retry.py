"""One retry policy for every request the writer makes (the daemon, --oneshot and prune): which failures
are tried again, how long to wait first, and what is logged about them."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from tenacity.stop import stop_base

from nfd_lite.api.errors import AccessDenied, ApiError, Conflict, Gone, explain
from nfd_lite.api.outage import Outage
from nfd_lite.metrics import WriterMetrics
from saidonce import SaidOnce

log = logging.getLogger(__name__)
T = TypeVar("T")
# A 401/403 is said when it starts and again every 10 minutes while it lasts: one clear line, not one per
# retry, that a long outage still keeps in view.
REFUSAL_REPEAT_AFTER = 600.0


class Stopped(Exception):
    """The writer was asked to stop while waiting to retry."""


class RetryPolicy:
    """Capped exponential backoff with jitter; at once after 410 and (twice) after 409; as the server asks
    after 429/503; slowly after 401/403 while running unbounded, since those need a human."""

    def __init__(
        self,
        *,
        max_backoff: float = 30.0,
        slow_retry: float = 30.0,
        final: tuple[type[Exception], ...] = (),
        stop: threading.Event | None = None,
        metrics: WriterMetrics | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.max_backoff = max_backoff
        self.slow_retry = slow_retry
        self.final = final  # failures never retried: they end the call at once
        self.stop = stop or threading.Event()
        self.metrics = metrics
        self.outage = outage
        self._refused: dict[str, str] = {}  # verb -> the 401/403 line its calls are stuck on
        self._refusals: SaidOnce[str] = SaidOnce(repeat_after=REFUSAL_REPEAT_AFTER)
        self._refusals_lock = threading.Lock()  # the Node watch and the main loop retry side by side

    def wait(self, retry_state: RetryCallState, bounded: bool) -> float:
        # "Equal jitter": half to all of 0.1 s * 2^n, at most max_backoff.
        exponential = wait_exponential(multiplier=0.1, max=self.max_backoff)(retry_state)
        base = exponential * random.uniform(0.5, 1.0)
        err = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(err, Gone):
            return 0.0
        if isinstance(err, Conflict) and retry_state.attempt_number <= 2:
            return random.uniform(0.0, 0.02)  # someone else wrote first: re-read and retry at once
        if isinstance(err, ApiError) and err.retry_after is not None:
            return err.retry_after + random.uniform(0.0, 0.05)
        if isinstance(err, AccessDenied) and not bounded:
            return max(base, self.slow_retry)
        return float(base)

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopped

    def _failed(self, retry_state: RetryCallState, verb: str) -> None:
        err = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(err, AccessDenied):
            with self._refusals_lock:
                self._refused[verb] = explain(err)
                lines = self._refusals.update(self._refused.values()).new
            for line in lines:
                log.error("%s", line)
        elif isinstance(err, ApiError):
            if not isinstance(err, Conflict):
                log.warning("%s failed (%s): %s", verb, err.code, err.message)
        elif err is not None:
            log.exception("%s failed unexpectedly", verb, exc_info=err)

    def _allowed(self, verb: str) -> None:
        """A call of ``verb`` succeeded: a refusal it was stuck on is over, and said again if it returns."""
        with self._refusals_lock:
            if self._refused.pop(verb, None) is not None:
                self._refusals.update(self._refused.values())

    def _retryable(self, err: BaseException) -> bool:
        # Only failures are retried: Ctrl-C, a stop or a final failure end the call at once.
        return isinstance(err, Exception) and not isinstance(err, (Stopped, *self.final))

    def call(self, fn: Callable[[], T], verb: str, attempts: int | None = None) -> T:
        """``fn()`` until it succeeds, ``attempts`` tries are used up, or the writer stops. A bounded run
        (``attempts``) reports a 401/403 soon instead of waiting on it."""
        bounded = attempts is not None
        stop: stop_base = stop_after_attempt(attempts) if attempts else _StopWhen(self.stop)
        retrying = Retrying(
            retry=retry_if_exception(self._retryable),
            wait=lambda state: self.wait(state, bounded),
            stop=stop,
            sleep=self._sleep,
            before_sleep=lambda state: self._failed(state, verb),
            reraise=True,
        )

        def counted() -> T:
            try:
                result = fn()
            except ApiError as err:
                if self.metrics is not None:
                    self.metrics.api_errors.labels(err.code).inc()
                if self.outage is not None:
                    self.outage.failed(err)
                raise
            if self.outage is not None:
                self.outage.answered()
            self._allowed(verb)
            return result

        return retrying(counted)


class _StopWhen(stop_base):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()
