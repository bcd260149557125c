"""Reads and writes of the served resources, with the real server's strategy, validation and admission."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from tests.apiserver.admission import Request
from tests.apiserver.auth import UserInfo
from tests.apiserver.labelrules import metadata_errors
from tests.apiserver.managed import apply, record_update, supplied
from tests.apiserver.objects import clone
from tests.apiserver.patches import json_patch, merge_patch, strategic_merge_patch
from tests.apiserver.selectors import field_selector, label_selector
from tests.apiserver.status import ApiError, conflict, invalid, not_found

if TYPE_CHECKING:
    from tests.apiserver.server import FakeApiServer


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    resource: str
    kind: str
    writable: bool


KINDS = {
    ("", "nodes"): Kind("", "v1", "nodes", "Node", True),
    ("node.k8s.io", "runtimeclasses"): Kind("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
}
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def get(api: FakeApiServer, kind: Kind, name: str) -> dict[str, Any]:
    obj = api.store.get(kind.resource, name)
    if obj is None:
        raise not_found(kind.resource, kind.group, name)
    return obj


def list_objects(api: FakeApiServer, kind: Kind, query: dict[str, str]) -> dict[str, Any]:
    fields, _ = field_selector(query.get("fieldSelector"))
    labels = label_selector(query.get("labelSelector"))
    items, rv = api.store.list_all(kind.resource)
    return {
        "kind": f"{kind.kind}List",
        "apiVersion": f"{kind.group}/{kind.version}" if kind.group else kind.version,
        "metadata": {"resourceVersion": str(rv)},
        "items": [o for o in items if fields(o) and labels(o)],
    }


def _decode(content_type: str, body: bytes) -> Any:
    try:
        if content_type == "application/apply-patch+yaml":
            return yaml.safe_load(body.decode())
        return json.loads(body.decode() or "null")
    except (ValueError, yaml.YAMLError) as exc:
        raise ApiError(400, f"error decoding patch: {exc}") from None


def manager_for(query: dict[str, str], user_agent: str) -> str:
    """fieldManager, else the User-Agent up to its first '/', as the real server derives it."""
    return query.get("fieldManager") or (user_agent.split("/", 1)[0] if user_agent else "unknown")


def patch(
    api: FakeApiServer,
    kind: Kind,
    name: str,
    subresource: str,
    user: UserInfo,
    content_type: str,
    body: bytes,
    query: dict[str, str],
    user_agent: str,
) -> dict[str, Any]:
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in PATCH_TYPES:
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(PATCH_TYPES),
        )
    document = _decode(media, body)
    with api.store.cond:  # read-modify-write is atomic, like the server's GuaranteedUpdate
        current = get(api, kind, name)
        if media == "application/apply-patch+yaml":
            if not query.get("fieldManager"):
                raise ApiError(400, "PATCH /apply requires a fieldManager")
            new = apply(current, document, query["fieldManager"], query.get("force") == "true")
            return _finish(api, kind, current, new, subresource, user, None, query)
        if media == "application/json-patch+json":
            new = json_patch(current, document)
        elif not isinstance(document, dict):
            raise ApiError(400, "error decoding patch: the patch must be a JSON object")
        elif media == "application/merge-patch+json":
            new = merge_patch(current, document)
        else:
            new = strategic_merge_patch(current, document)
        return _finish(api, kind, current, new, subresource, user, manager_for(query, user_agent), query)


def update(
    api: FakeApiServer,
    kind: Kind,
    name: str,
    subresource: str,
    user: UserInfo,
    body: bytes,
    query: dict[str, str],
    user_agent: str,
) -> dict[str, Any]:
    document = _decode("application/json", body)
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        raise ApiError(400, "the body must be a Node object")
    with api.store.cond:
        current = get(api, kind, name)
        new = clone(document)  # without resourceVersion an update is unconditional, as nodes allow
        return _finish(api, kind, current, new, subresource, user, manager_for(query, user_agent), query)


def _finish(
    api: FakeApiServer,
    kind: Kind,
    current: dict[str, Any],
    new: Any,
    subresource: str,
    user: UserInfo,
    update_manager: str | None,
    query: dict[str, str],
) -> dict[str, Any]:
    name = current["metadata"]["name"]
    if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
        raise invalid(kind.kind, name, [("metadata", "Required value")])
    new = clone(new)  # patch results share unchanged parts with `current`; edits below must not reach it
    rv = new["metadata"].get("resourceVersion")
    if rv not in (None, "") and str(rv) != current["metadata"]["resourceVersion"]:  # "" means no precondition
        raise conflict(kind.resource, name)
    if new["metadata"].get("name") != name:
        raise invalid(kind.kind, name, [("metadata.name", "Invalid value: field is immutable")])
    new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
    for key in ("uid", "creationTimestamp"):
        new["metadata"][key] = current["metadata"][key]
    # Node strategy: the main resource cannot change status, the status subresource cannot change spec.
    if subresource == "status":
        new["spec"] = clone(current.get("spec", {}))
    else:
        new["status"] = clone(current.get("status", {}))
    if update_manager is not None:
        # A write to the main resource may set managedFields itself, as on the real server (and only the
        # admission policy stops the writer doing so); a subresource write never does.
        if subresource or not supplied(new["metadata"].get("managedFields")):
            new["metadata"]["managedFields"] = clone(current["metadata"].get("managedFields"))
            if new["metadata"]["managedFields"] is None:
                del new["metadata"]["managedFields"]
        record_update(current, new, update_manager)
    _validate(kind, new)
    req = Request(
        "UPDATE",
        kind.group,
        kind.version,
        kind.resource,
        kind.kind,
        name,
        user,
        subresource,
        dry_run=query.get("dryRun") == "All",
    )
    api.admission.validate(req, new, current)
    if req.dry_run:
        return new
    return api.store.replace(kind.resource, current, new)


def _validate(kind: Kind, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    causes = metadata_errors(labels, annotations)
    for field, values in (("labels", labels), ("annotations", annotations)):
        for key, value in values.items():
            if not isinstance(value, str):
                causes.append((f"metadata.{field}[{key}]", "Invalid value: must be a string"))
    for index, taint in enumerate((obj.get("spec") or {}).get("taints") or []):
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append((f"spec.taints[{index}].key", "Required value"))
        elif taint.get("effect") not in TAINT_EFFECTS:
            causes.append((f"spec.taints[{index}].effect", f'Unsupported value: "{taint.get("effect")}"'))
    if causes:
        raise invalid(kind.kind, meta["name"], causes)
