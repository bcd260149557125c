"""Go's duration text (``500ms``, ``60s``, ``1m30s``, ``1.5h``), as NVIDIA's flags and config file take it.

durationpy reads it. durationpy also reads days, weeks, months and years (``1d``), which Go's
``time.ParseDuration`` refuses, so a file or flag NVIDIA's GFD would refuse is refused here too.
"""

from __future__ import annotations

from datetime import timedelta

import durationpy

_BEYOND_GO_UNITS = ("d", "w", "mm", "y")


def parse_go_duration(text: str) -> timedelta:
    """``"1m30s"`` -> 90 seconds; ValueError for anything Go would not read (``"5"`` lacks its unit)."""
    try:
        if any(unit in text for unit in _BEYOND_GO_UNITS):
            raise durationpy.DurationError(text)
        delta: timedelta = durationpy.from_str(text)
    except durationpy.DurationError:
        raise ValueError(f"{text!r} is no Go duration") from None
    return delta


def format_go_duration(delta: timedelta) -> str:
    """``timedelta(seconds=90)`` -> ``"1m30s"``, as the flags take it."""
    return str(durationpy.to_str(delta))
