"""Kubernetes label rules, shared by the label producer (gfd) and the label writer (nfd_lite).

A label key is ``[prefix/]name``: the prefix a lowercase DNS subdomain of at most 253
characters (Kubernetes limits the whole prefix, not each of its dot-separated parts), the name at
most 63 characters of ``[A-Za-z0-9_.-]`` beginning and ending with an alphanumeric. A value is
empty or follows the same rules as a name. Each check returns ``None`` when valid, else a short
reason. Patterns must match the whole string (``fullmatch``): ``$`` would also match before a
trailing newline, which the API server refuses.
"""

from __future__ import annotations

import re

MAX_NAME = 63
MAX_PREFIX = 253
_RULE = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def name_problem(name: str) -> str | None:
    if not name:
        return "name is empty"
    if len(name) > MAX_NAME:
        return f"name is {len(name)} characters, more than {MAX_NAME}"
    if not _NAME.fullmatch(name):
        return f"name must be {_RULE}"
    return None


def prefix_problem(prefix: str) -> str | None:
    if not prefix:
        return "prefix is empty"
    if len(prefix) > MAX_PREFIX:
        return f"prefix is {len(prefix)} characters, more than {MAX_PREFIX}"
    if not _DNS_SUBDOMAIN.fullmatch(prefix):
        return "prefix must be a lowercase DNS subdomain"
    return None


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (problem := prefix_problem(prefix)):
        return f"invalid key {key!r}: {problem}"
    if problem := name_problem(name):
        return f"invalid key {key!r}: {problem}"
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None."""
    if value == "":
        return None
    if len(value) > MAX_NAME:
        return f"invalid value: {len(value)} characters, more than {MAX_NAME}"
    if not _NAME.fullmatch(value):
        return f"invalid value: must be {_RULE}"
    return None
