"""Helpers for JSON-shaped objects shared by the store and the write path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def clone(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def now() -> str:
    """The current time as the API server writes timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
