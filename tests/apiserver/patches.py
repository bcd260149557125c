"""The three PATCH flavours the API server accepts for built-in types (server-side apply lives in managed.py).

Errors are raised as ApiError with the codes the real server uses: 400 for a body that does not decode,
422 for a JSON patch operation that cannot be applied.
"""

from __future__ import annotations

from typing import Any

from tests.apiserver.objects import clone
from tests.apiserver.status import ApiError

# Lists that strategic merge patch merges by key instead of replacing (patchMergeKey in the Go types).
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("spec", "taints"): "key",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("metadata", "ownerReferences"): "uid",
}
# Lists of scalars that strategic merge patch merges as sets.
SET_LISTS = {("metadata", "finalizers")}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge as far as Nodes need it: maps merge (null deletes, `$patch: replace|delete`),
    keyed lists (taints, conditions) merge by key, finalizers merge as a set, other lists replace."""
    if not isinstance(patch, dict):
        return clone(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        sub = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and sub in MERGE_KEYS:
            result[key] = _merge_keyed_list(result.get(key) or [], value, MERGE_KEYS[sub])
        elif isinstance(value, list) and sub in SET_LISTS:
            old = list(result.get(key) or [])
            result[key] = old + [v for v in value if v not in old]
        else:
            merged = strategic_merge_patch(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_keyed_list(old: list[Any], patch: list[Any], key: str) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [clone(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    result = [clone(i) for i in old]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(400, f"map: {item!r} does not contain declared merge key: {key}")
        index = next((n for n, cur in enumerate(result) if cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(clone(item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"JSON pointer must start with '/': {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], op: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(
                422, f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}"
            ) from None
    return node, parts[-1]


def _get(doc: Any, parts: list[str], op: str) -> Any:
    if not parts:
        return doc
    parent, last = _parent(doc, parts, op)
    try:
        return parent[int(last)] if isinstance(parent, list) else parent[last]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(
            422, f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}"
        ) from None


def _remove(doc: Any, parts: list[str], op: str) -> Any:
    value = _get(doc, parts, op)
    parent, last = _parent(doc, parts, op)
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    return value


def _add(doc: Any, parts: list[str], value: Any, op: str, replace: bool = False) -> Any:
    if not parts:
        return clone(value)
    parent, last = _parent(doc, parts, op)
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if replace:
            parent[index] = clone(value)
        else:
            parent.insert(index, clone(value))
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, f"replace operation does not apply: doc is missing key: /{'/'.join(parts)}")
        parent[last] = clone(value)
    else:
        raise ApiError(422, f"{op} operation does not apply: /{'/'.join(parts)} is not a container")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test) on a deep copy of target."""
    if not isinstance(ops, list):
        raise ApiError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = clone(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"invalid JSON patch operation: {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind in ("add", "replace"):
            if "value" not in op:
                raise ApiError(422, f"{kind} operation is missing 'value'")
            doc = _add(doc, parts, op["value"], kind, replace=kind == "replace")
        elif kind == "remove":
            _remove(doc, parts, kind)
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = _remove(doc, source, kind) if kind == "move" else clone(_get(doc, source, kind))
            doc = _add(doc, parts, value, kind)
        elif kind == "test":
            if _get(doc, parts, kind) != op.get("value"):
                raise ApiError(422, f"testing value /{'/'.join(parts)} failed: test failed")
        else:
            raise ApiError(422, f"Unexpected kind: {kind}")
    return doc
