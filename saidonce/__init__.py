"""Saying a problem once: a node that stays broken must not fill its log pass after pass.

The one way both commands keep repeated messages out of their logs: gfd's warnings and failed passes,
nfd-lite's rescans and its refused requests. The caller hands over the problems it sees each time it looks
(a pass, a rescan, a failed attempt) and says what comes back: each problem when it appears, not again
while it lasts, and again after it went away and came back.

A package of its own, shared by gfd and nfd_lite, as ``k8slabels``, ``featurefile`` and ``hostport`` are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Change", "SaidOnce"]

P = TypeVar("P", bound=Hashable)


@dataclass(frozen=True)
class Change(Generic[P]):
    """What one look gives to say."""

    new: tuple[P, ...] = ()  # appeared, came back, or still there after ``repeat_after``; in the order seen
    recovered: bool = False  # the previous look had problems and this one has none


class SaidOnce(Generic[P]):
    """Reports each problem once per change: when it appears, and again when it comes back after a look
    without it.

    ``repeat_after`` (seconds, by ``clock``): a problem still there that long after it was last said is
    said again, so a long outage stays visible in a log that would otherwise show only its start.
    """

    def __init__(
        self, *, repeat_after: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.repeat_after = repeat_after
        self.clock = clock
        self._said: dict[P, float] = {}  # the last look's problems -> when each was last said

    @property
    def current(self) -> frozenset[P]:
        """The problems of the last look."""
        return frozenset(self._said)

    def update(self, problems: Iterable[P]) -> Change[P]:
        """Take the problems seen now (duplicates count once); return those to say now."""
        now = self.clock()
        said: dict[P, float] = {}
        new: list[P] = []
        for problem in problems:
            if problem in said:
                continue
            last = self._said.get(problem)
            if last is None or (self.repeat_after is not None and now - last >= self.repeat_after):
                new.append(problem)
                last = now
            said[problem] = last
        recovered = bool(self._said) and not said
        self._said = said
        return Change(tuple(new), recovered)
