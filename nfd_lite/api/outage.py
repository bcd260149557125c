"""How long the API server has been unreachable or failing, as the writer's requests and the client's
answers tell it, from the main loop, the Node watch and /readyz side by side."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from nfd_lite.api.errors import ApiError, ConnectionFailed, ServerError

log = logging.getLogger(__name__)


class Outage:
    """How long the API server has been unreachable or failing. An outage this long may have been an
    upgrade that dropped the admission policy, so the writer checks it again before its next write.

    Unreachable means no answer at all (refused, timed out, a watch gone silent): what a NetworkPolicy
    whose egress no longer matches the API server looks like. Once a request has failed so and nothing
    answered for ``unreachable_after`` seconds, ``unreachable()`` is true (/readyz fails, a metric says
    so) and one log line names the likely cause, once per outage; the first answer ends it.

    Every time is read from ``clock``; every field below the lock is read and written under it."""

    def __init__(
        self,
        long_after: float,
        unreachable_after: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.long_after = long_after
        self.unreachable_after = unreachable_after
        self._clock = clock
        self._lock = threading.Lock()  # the main loop, the Node watch and /readyz look at it side by side
        self._since: float | None = None  # when requests began to fail (no answer, or 5xx), if they do
        self._long_one_ended = False  # an outage of long_after or more ended, not yet taken
        self._last_answer = clock()  # start-up counts as an answer: the bound runs from here at first
        self._unanswered: str | None = None  # the last failure without an answer since, if any
        self._said = False  # the unreachable line was logged for this outage

    def failed(self, err: ApiError) -> None:
        if not isinstance(err, ConnectionFailed | ServerError):
            return
        with self._lock:
            if self._since is None:
                self._since = self._clock()
            if isinstance(err, ConnectionFailed):
                self._unanswered = err.message
        if isinstance(err, ConnectionFailed):
            self.unreachable()  # says the line once the bound has passed

    def answered(self) -> None:
        """A request succeeded: an outage, if one was going on, is over."""
        with self._lock:
            if self._since is not None:
                if self._clock() - self._since >= self.long_after:
                    self._long_one_ended = True
                self._since = None

    def heard(self) -> None:
        """The API server answered (the client calls this on every HTTP response, an error's too, and on
        each watch event or bookmark). A call that succeeds without a request, such as a sync pass with
        nothing to send, is no answer."""
        with self._lock:
            now = self._clock()
            silent, was_said = now - self._last_answer, self._said
            self._last_answer = now
            self._unanswered, self._said = None, False
        if was_said:
            log.info("the API server answers again, after %.0f s without an answer", silent)

    def take_long_one(self) -> bool:
        """Whether a long outage ended since the last call."""
        with self._lock:
            ended, self._long_one_ended = self._long_one_ended, False
        return ended

    def unreachable_for(self) -> float:
        """Seconds since the API server last answered, while a request has failed without an answer
        since; 0 otherwise."""
        with self._lock:
            return 0.0 if self._unanswered is None else self._clock() - self._last_answer

    def unreachable(self) -> bool:
        """Whether the API server has been unreachable for ``unreachable_after`` or longer; the first
        time in an outage, say why in one line."""
        with self._lock:
            silent = self._clock() - self._last_answer
            if self._unanswered is None or silent < self.unreachable_after:
                return False
            say, self._said = not self._said, True
            error = self._unanswered
        if say:
            log.error("%s", unreachable_line(silent, error))
        return True


def unreachable_line(silent: float, error: str) -> str:
    """The one line said when the API server stays unreachable: the likely cause and what to change."""
    return (
        f"cannot reach the API server: no answer for {silent:.0f} s ({error}); the likely cause is a "
        "NetworkPolicy whose egress no longer matches the API server's address or port (a control plane "
        "replaced or moved): with the gpu-labeller chart, set networkPolicy.apiServerEgress=cilium or "
        "calico where the network plugin follows the API server itself, or correct "
        "networkPolicy.apiServerCIDRs / apiServerPorts (docs/deploy.md, NetworkPolicy)"
    )
