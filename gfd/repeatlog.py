"""Saying a repeated problem once: a node that stays broken must not fill its log pass after pass."""

from __future__ import annotations

import logging


class RepeatFilter(logging.Filter):
    """Lets a warning through once while it repeats pass after pass (a GPU that never reports its
    memory should not fill the log every minute); it is shown again after a pass without it."""

    def __init__(self) -> None:
        super().__init__()
        self._previous: set[str] = set()
        self._current: set[str] = set()

    def new_pass(self) -> None:
        self._previous, self._current = self._current, set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        self._current.add(message)
        return message not in self._previous


class FailureLog:
    """Logs a failed pass once per distinct failure, not once per pass, and the recovery once."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.last: str | None = None  # the failure in progress, None while passes succeed

    def failed(self, line: str, *, labels_kept: bool) -> None:
        if line != self.last:
            self.log.error("%s%s", line, "; the labels already written stay" if labels_kept else "")
            self.last = line

    def succeeded(self, backend: str) -> None:
        if self.last is not None:
            self.log.info("pass succeeded again (backend %s)", backend)
            self.last = None
