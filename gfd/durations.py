"""Go's duration text (``500ms``, ``60s``, ``1m30s``, ``1.5h``), as NVIDIA's flags and config file take it.

durationpy reads it. durationpy also reads days, weeks, months and years (``1d``), which Go's
``time.ParseDuration`` refuses, so a file or flag NVIDIA's GFD would refuse is refused here too.
durationpy is imported only when a duration is read or written: most runs never give one.
"""

from __future__ import annotations

from datetime import timedelta

_BEYOND_GO_UNITS = ("d", "w", "mm", "y")
_EXPECTED = "a Go duration such as 60s, 5m or 1h30m, or 'infinite'"


def parse_go_duration(text: str) -> timedelta:
    """``"1m30s"`` -> 90 seconds; ValueError for anything Go would not read (``"5"`` lacks its unit)."""
    import durationpy

    try:
        if any(unit in text for unit in _BEYOND_GO_UNITS):
            raise durationpy.DurationError(text)
        delta: timedelta = durationpy.from_str(text)
    except durationpy.DurationError:
        raise ValueError(f"{text!r} is no Go duration") from None
    return delta


def parse_interval(value: str | int | float) -> timedelta | None:
    """``--sleep-interval`` and ``--expiry`` from a flag, a variable or the config file; None: infinite.

    Text is a Go duration or ``infinite``. A bare number (only a config file gives one) is nanoseconds,
    as Go reads a ``time.Duration`` from YAML or JSON. The result is always more than zero.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "infinite":
            return None
        try:
            delta = parse_go_duration(text)
        except ValueError:
            raise ValueError(f"expected {_EXPECTED}, got {value!r}") from None
    else:
        try:
            delta = timedelta(microseconds=value / 1000)
        except (OverflowError, ValueError):  # infinite, NaN, or beyond any duration
            raise ValueError(f"expected {_EXPECTED}, or a number of nanoseconds, got {value!r}") from None
        if value > 0 and not delta:  # timedelta keeps microseconds: a few nanoseconds would be zero
            raise ValueError(f"{value!r} nanoseconds is under the shortest interval gfd takes, 1µs")
    if delta <= timedelta(0):
        raise ValueError(f"must be more than zero, got {value!r}")
    return delta


def format_go_duration(delta: timedelta) -> str:
    """``timedelta(seconds=90)`` -> ``"1m30s"``, as the flags take it."""
    import durationpy

    return str(durationpy.to_str(delta))
