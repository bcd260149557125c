"""managedFields bookkeeping and server-side apply, for the parts of a Node the writer touches.

Ownership is tracked for metadata.labels and metadata.annotations keys, per manager and operation
(Apply or Update), in the real `managedFields` format (FieldsV1: {"f:metadata": {"f:labels": {"f:k": {}}}}).
Other fields in an apply body are merged but not tracked.
"""

from __future__ import annotations

from typing import Any

from tests.apiserver.objects import clone, now
from tests.apiserver.patches import strategic_merge_patch
from tests.apiserver.status import ApiError

TRACKED = ("labels", "annotations")
Owned = dict[str, set[str]]


def _owned(entry: dict[str, Any]) -> Owned:
    meta: dict[str, Any] = entry.get("fieldsV1", {}).get("f:metadata", {})
    return {f: {k[2:] for k in meta.get(f"f:{f}", {})} for f in TRACKED}


def _entry(manager: str, operation: str, owned: Owned) -> dict[str, Any]:
    meta: dict[str, Any] = {
        f"f:{f}": {f"f:{k}": {} for k in sorted(keys)} for f, keys in owned.items() if keys
    }
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": meta},
    }


def _entries(obj: dict[str, Any]) -> list[tuple[str, str, Owned]]:
    return [(e["manager"], e["operation"], _owned(e)) for e in obj["metadata"].get("managedFields") or []]


def _store(obj: dict[str, Any], entries: list[tuple[str, str, Owned]], manager: str) -> None:
    """Only the writing manager's entry gets a new time; the others keep theirs, as on the real server
    (an admission policy comparing other managers' entries must see them unchanged)."""
    previous = obj["metadata"].get("managedFields") or []
    times = {(e["manager"], e["operation"]): e.get("time") for e in previous}
    kept = []
    for m, op, owned in entries:
        if any(owned.values()):
            entry = _entry(m, op, owned)
            if m != manager and times.get((m, op)):
                entry["time"] = times[(m, op)]
            kept.append(entry)
    if kept:
        obj["metadata"]["managedFields"] = kept
    else:
        obj["metadata"].pop("managedFields", None)


def owners(obj: dict[str, Any], field: str, key: str) -> list[str]:
    """Managers owning metadata.<field>[key] (field is "labels" or "annotations")."""
    return [m for m, _, owned in _entries(obj) if key in owned[field]]


def _diff(old: dict[str, Any], new: dict[str, Any], field: str) -> tuple[set[str], set[str]]:
    before = old["metadata"].get(field) or {}
    after = new["metadata"].get(field) or {}
    changed = {k for k, v in after.items() if before.get(k) != v}
    return changed, set(before) - set(after)


def supplied(entries: Any) -> bool:
    """Whether a write's own managedFields replace the live ones, as the real server decides it
    (fieldmanager's decodeLiveOrNew): a non-empty list of entries it can decode. Anything else, and a write
    that leaves them as they were, keeps the live entries."""
    return (
        isinstance(entries, list)
        and bool(entries)
        and all(
            isinstance(e, dict)
            and isinstance(e.get("manager"), str)
            and e.get("operation") in ("Apply", "Update")
            and isinstance(e.get("fieldsV1", {}), dict)
            for e in entries
        )
    )


def record_update(old: dict[str, Any], new: dict[str, Any], manager: str) -> None:
    """An Update (any non-apply write) takes ownership of what it changed, from every other manager. The
    entries it starts from are ``new``'s: the live ones, or those the write supplied (``supplied``)."""
    entries = _entries(new)
    gained: Owned = {f: set() for f in TRACKED}
    for field in TRACKED:
        changed, removed = _diff(old, new, field)
        gained[field] = changed
        for _, _, owned in entries:
            owned[field] -= changed | removed
    mine = next((e for e in entries if e[0] == manager and e[1] == "Update"), None)
    if mine is None:
        entries.append((manager, "Update", gained))
    else:
        for field in TRACKED:
            mine[2][field] |= gained[field]
    _store(new, entries, manager)


def apply(current: dict[str, Any], applied: Any, manager: str, force: bool) -> dict[str, Any]:
    """Server-side apply of `applied` (the manager's full intent) onto `current`; returns the new object."""
    if not isinstance(applied, dict) or not applied.get("apiVersion") or not applied.get("kind"):
        raise ApiError(400, "apply patch must set apiVersion and kind")
    name = current["metadata"]["name"]
    applied_name = (applied.get("metadata") or {}).get("name")
    if applied_name not in (None, name):
        raise ApiError(
            400, f"the name of the object ({applied_name}) does not match the name on the URL ({name})"
        )
    entries = _entries(current)
    others = [(m, owned) for m, op, owned in entries if not (m == manager and op == "Apply")]
    empty: Owned = {f: set() for f in TRACKED}
    previous = next((o for m, op, o in entries if m == manager and op == "Apply"), empty)
    intent = {f: dict((applied.get("metadata") or {}).get(f) or {}) for f in TRACKED}

    conflicts: list[tuple[str, str]] = []
    for field in TRACKED:
        values = current["metadata"].get(field) or {}
        for key, value in intent[field].items():
            if key in values and values[key] != value:
                conflicts += [
                    (m, f".metadata.{field}.{key}")
                    for m, owned in others
                    if m != manager and key in owned[field]
                ]
    if conflicts and not force:
        raise _apply_conflict(conflicts)

    new = clone(current)
    rest = {k: v for k, v in applied.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    new.update(strategic_merge_patch({k: new.get(k) for k in rest}, rest))
    for key in ("resourceVersion",):
        if key in (applied.get("metadata") or {}):
            new["metadata"][key] = applied["metadata"][key]
    for field in TRACKED:
        values = dict(new["metadata"].get(field) or {})
        values.update(intent[field])
        for key in previous[field] - set(intent[field]):
            if not any(key in owned[field] for _, owned in others):
                values.pop(key, None)
        new["metadata"][field] = values
        for _, owned in others:
            if force:
                owned[field] -= set(intent[field])
            owned[field] &= set(values)
    kept = [(m, op, o) for m, op, o in entries if not (m == manager and op == "Apply")]
    kept.append((manager, "Apply", {f: set(intent[f]) for f in TRACKED}))
    _store(new, kept, manager)
    return new


def _apply_conflict(conflicts: list[tuple[str, str]]) -> ApiError:
    managers = sorted({m for m, _ in conflicts})
    fields = [f for _, f in conflicts]
    if len(conflicts) == 1:
        text = f'Apply failed with 1 conflict: conflict with "{managers[0]}" using v1: {fields[0]}'
    else:
        who = ", ".join(f'"{m}"' for m in managers)
        text = f"Apply failed with {len(conflicts)} conflicts: conflicts with {who} using v1:\n" + "\n".join(
            f"- {f}" for f in fields
        )
    causes = [
        {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": f}
        for m, f in conflicts
    ]
    return ApiError(409, text, details={"causes": causes})
