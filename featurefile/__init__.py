"""The NFD feature-file format, shared by its writer (gfd) and its reader (nfd_lite).

This is the text that upstream NFD's ``local`` source reads from ``features.d``:

- one feature per line, ``key=value``; a bare ``key`` means ``key=true``; the value is everything after
  the first ``=``;
- surrounding whitespace is ignored, and so are blank lines and lines starting with ``#``, except
  directives ``# +name[=value]``: ``+expiry-time=<RFC3339>`` applies to every feature after it in the same
  file, ``+no-label`` and ``+no-feature`` to the next feature only;
- names without a ``prefix/`` get ``feature.node.kubernetes.io/``;
- a file holds at most 64 KiB.

A package of its own rather than a module of ``k8slabels``: these are NFD's rules for one file, not
Kubernetes' rules for labels, and the two change for different reasons. It is pure (no I/O): reading a
file safely is the reader's business, writing it atomically the writer's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

DEFAULT_PREFIX = "feature.node.kubernetes.io/"
MAX_FILE_SIZE = 64 * 1024  # bytes; a larger file is not read at all
COMMENT = "#"
DIRECTIVE = "# +"
EXPIRY_TIME = "expiry-time"
NO_LABEL = "no-label"
NO_FEATURE = "no-feature"  # concerns NFD's raw features only, never labels
EXPIRY_DIRECTIVE = f"{DIRECTIVE}{EXPIRY_TIME}="
BARE_KEY_VALUE = "true"
# RFC 3339 as Go's time.RFC3339 parses it; fromisoformat alone would also take dates without a time.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


@dataclass(frozen=True, slots=True)
class Directive:
    """A ``# +name[=value]`` line; ``value`` None when the line has no ``=``."""

    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class Entry:
    """A feature line: ``key`` with its prefix (the default one added to a bare name)."""

    key: str
    value: str


def full_key(name: str) -> str:
    return name if "/" in name else DEFAULT_PREFIX + name


def parse_line(line: str) -> Directive | Entry | None:
    """One line without its newline; None for a blank line or a comment."""
    line = line.strip()
    if not line:
        return None
    if line.startswith(COMMENT):
        if not line.startswith(DIRECTIVE):
            return None
        name, has_value, value = line[len(DIRECTIVE) :].partition("=")
        return Directive(name, value if has_value else None)
    name, has_value, value = line.partition("=")
    return Entry(full_key(name), value if has_value else BARE_KEY_VALUE)


def format_expiry(expiry: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as NFD parses it: 2026-12-02T18:00:00Z."""
    return expiry.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_expiry(text: str) -> datetime | None:
    """An ``+expiry-time`` value, or None when it is not an RFC 3339 time."""
    text = text.strip()
    if not _RFC3339.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text.upper())
    except ValueError:  # well-formed but impossible, such as month 13
        return None


def render(labels: Mapping[str, str], expiry: datetime | None, comment: str | None = None) -> str:
    """A whole file: the comment, the expiry directive (first, so it covers every label), then the labels
    sorted by key, so that equal label sets give byte-equal files."""
    lines = [f"{COMMENT} {comment}"] if comment is not None else []
    if expiry is not None:
        lines.append(EXPIRY_DIRECTIVE + format_expiry(expiry))
    lines.extend(f"{key}={labels[key]}" for key in sorted(labels))
    return "\n".join(lines) + "\n"
