"""Field and label selectors as the API server parses them for LIST and WATCH."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.apiserver.status import ApiError

Matcher = Callable[[dict[str, Any]], bool]

# The fields the real server indexes for nodes; anything else is refused with 400.
_NODE_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda obj: obj["metadata"]["name"],
    "spec.unschedulable": lambda obj: str(bool(obj.get("spec", {}).get("unschedulable", False))).lower(),
}
_SET_RE = re.compile(r"^\s*(!?[^\s!=()]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside `in (...)` parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in (p.strip() for p in parts) if p]


def field_selector(text: str | None) -> tuple[Matcher, str | None]:
    """A matcher and, when the selector pins metadata.name to one value, that name (used by authz)."""
    if not text:
        return (lambda obj: True), None
    checks: list[Matcher] = []
    exact_name: str | None = None
    for term in _split_top(text):
        match = re.match(r"^([^!=]+)(==|!=|=)(.*)$", term)
        if not match:
            raise ApiError(400, f'invalid selector: "{text}"; can\'t understand "{term}"')
        field, op, value = match.group(1).strip(), match.group(2), match.group(3).strip()
        getter = _NODE_FIELDS.get(field)
        if getter is None:
            raise ApiError(400, f"field label not supported: {field}")
        checks.append(_field_check(getter, op == "!=", value))
        if op != "!=" and field == "metadata.name":
            exact_name = value
    return (lambda obj: all(check(obj) for check in checks)), exact_name


def label_selector(text: str | None) -> Matcher:
    if not text:
        return lambda obj: True
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_top(text):
        eq = re.match(r"^([^!=\s]+)\s*(==|!=|=)\s*([^\s]*)$", term)
        if eq:
            key, op, value = eq.groups()
            checks.append(_label_check(key, "!=" if op == "!=" else "=", {value}))
            continue
        match = _SET_RE.match(term)
        if not match:
            raise ApiError(400, f"unable to parse requirement: {term!r}")
        key, op, values_text = match.groups()
        if op is None:
            checks.append(
                _label_check(key[1:], "!exists", set())
                if key.startswith("!")
                else _label_check(key, "exists", set())
            )
            continue
        values = {v.strip() for v in values_text.split(",") if v.strip()}
        checks.append(_label_check(key, op, values))

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return matches


def _field_check(getter: Callable[[dict[str, Any]], str], negate: bool, value: str) -> Matcher:
    def check(obj: dict[str, Any]) -> bool:
        return (getter(obj) == value) != negate

    return check


def _label_check(key: str, op: str, values: set[str]) -> Callable[[dict[str, str]], bool]:
    def check(labels: dict[str, str]) -> bool:
        present = key in labels
        if op == "exists":
            return present
        if op == "!exists":
            return not present
        if op in ("=", "in"):
            return present and labels[key] in values
        return not present or labels[key] not in values  # != and notin also match a missing key

    return check
