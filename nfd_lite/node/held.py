"""Labels the admission policy refused, held back so that the rest of a change still goes through.

A patch is all or nothing: one label the server's policy refuses (a prefix the policy no longer allows,
a label a site's own policy protects) would otherwise refuse every other label with it, pass after pass.
A refusal that names labels of the patch holds just those back: the caller (a sync pass, ``prune``)
plans and sends the change again without them at once, and they are tried again after ``retry_after``
seconds. A refusal that names none of them is the whole patch's, and the caller raises it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from nfd_lite.api.errors import AdmissionRefused

_SEPARATORS = re.compile(r"[\s,]+")
_QUOTES = "'\"`.;:()[]{}"  # around a key in a message; no label key starts or ends with one


def refused_keys(message: str, keys: Iterable[str]) -> frozenset[str]:
    """The ``keys`` a refusal's ``message`` names, each as a word of its own (the admission policy lists
    the labels it refuses, separated by commas)."""
    words = {word.strip(_QUOTES) for word in _SEPARATORS.split(message)}
    return frozenset(key for key in keys if key in words)


class HeldKeys:
    """Refused label keys, each with the refusal's message, held back until ``retry_after`` seconds after
    their refusal."""

    def __init__(self, retry_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_after = retry_after
        self.clock = clock
        self._until: dict[str, float] = {}
        self.reasons: dict[str, str] = {}

    def keys(self) -> frozenset[str]:
        """The keys held now (a hold that has run out is dropped: its key is tried again)."""
        now = self.clock()
        self._until = {key: until for key, until in self._until.items() if until > now}
        self.reasons = {key: self.reasons[key] for key in self._until}
        return frozenset(self._until)

    def hold(self, keys: Iterable[str], reason: str) -> None:
        until = self.clock() + self.retry_after
        for key in keys:
            self._until[key] = until
            self.reasons[key] = reason

    def hold_refused(self, err: AdmissionRefused, touched: frozenset[str]) -> bool:
        """Hold back the label keys of a patch (``touched``: ``Plan.touched``) that its refusal ``err``
        names and that are not held yet. False when it names none: the refusal is the whole patch's."""
        named = refused_keys(err.message, touched) - self.keys()
        self.hold(named, err.message)
        return bool(named)

    def next_retry(self) -> float | None:
        """When (``clock`` time) the first held key is due to be tried again; None when none is held."""
        return min(self._until.values(), default=None)
