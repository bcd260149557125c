"""Bearer-token authentication and RBAC authorization evaluated from the manifests in rbac/.

The built-in bindings of a fresh cluster that matter here are emulated: system:masters may do
everything, authenticated users may read discovery, everyone may read /version and the health paths.
"""

from __future__ import annotations

import fnmatch
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.apiserver.status import ApiError, qualified

PUBLIC_PATHS = ("/version", "/version/", "/healthz", "/livez", "/readyz")
DISCOVERY_PATHS = ("/api", "/api/*", "/apis", "/apis/*", "/openapi/*")


@dataclass(frozen=True)
class UserInfo:
    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)

    def as_admission(self) -> dict[str, Any]:
        """userInfo as the admission request serializes it (empty fields omitted, as omitempty does)."""
        info: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {k: list(v) for k, v in self.extra.items()}
        return info


ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True)
class Attributes:
    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""  # set for non-resource requests

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


class Tokens:
    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}

    def issue(self, user: UserInfo) -> str:
        token = secrets.token_urlsafe(24)
        self._users[token] = user
        return token

    def revoke(self, token: str) -> None:
        self._users.pop(token, None)

    def authenticate(self, header: str | None) -> UserInfo:
        """The user for an Authorization header; no header is anonymous, a bad token is 401."""
        if not header:
            return ANONYMOUS
        scheme, _, token = header.partition(" ")
        user = self._users.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise ApiError(401, "Unauthorized")
        return user


def service_account_user(namespace: str, name: str, node_name: str | None, node_uid: str = "") -> UserInfo:
    extra: dict[str, list[str]] = {}
    if node_name:
        # Pod-bound tokens carry the pod and, with ServiceAccountTokenPodNodeInfo, the node.
        extra = {
            "authentication.kubernetes.io/credential-id": [f"JTI={secrets.token_hex(8)}"],
            "authentication.kubernetes.io/node-name": [node_name],
            "authentication.kubernetes.io/node-uid": [node_uid or secrets.token_hex(8)],
            "authentication.kubernetes.io/pod-name": [f"{name}-{secrets.token_hex(3)}"],
            "authentication.kubernetes.io/pod-uid": [secrets.token_hex(8)],
        }
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        uid=secrets.token_hex(8),
        extra=extra,
    )


class Rbac:
    """ClusterRoles/Roles and their bindings, as loaded from YAML documents."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.roles: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (namespace or "", name) -> rules
        self.bindings: list[dict[str, Any]] = []
        for doc in documents:
            kind, meta = doc.get("kind"), doc.get("metadata", {})
            if kind in ("ClusterRole", "Role"):
                key = ("" if kind == "ClusterRole" else meta.get("namespace", "default"), meta["name"])
                self.roles[key] = list(doc.get("rules") or [])
            elif kind in ("ClusterRoleBinding", "RoleBinding"):
                self.bindings.append(doc)

    @classmethod
    def from_dir(cls, path: Path) -> Rbac:
        docs: list[dict[str, Any]] = []
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else []:
            docs += [d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
        return cls(docs)

    def allows(self, user: UserInfo, attrs: Attributes) -> bool:
        if "system:masters" in user.groups:
            return True
        if not attrs.is_resource and attrs.verb == "get":
            if any(fnmatch.fnmatchcase(attrs.path, p) for p in PUBLIC_PATHS):
                return True
            authenticated = "system:authenticated" in user.groups
            if authenticated and any(fnmatch.fnmatchcase(attrs.path, p) for p in DISCOVERY_PATHS):
                return True
        for binding in self.bindings:
            if not any(_subject_matches(s, user, binding) for s in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            is_role_binding = binding["kind"] == "RoleBinding"
            namespace = binding["metadata"].get("namespace", "default") if is_role_binding else ""
            if is_role_binding and attrs.namespace != namespace:
                continue  # a RoleBinding grants only inside its namespace
            role_ns = namespace if ref["kind"] == "Role" else ""
            for rule in self.roles.get((role_ns, ref["name"]), []):
                if _rule_matches(rule, attrs):
                    return True
        return False

    def check(self, user: UserInfo, attrs: Attributes) -> None:
        if not self.allows(user, attrs):
            raise forbidden(user, attrs)


def _subject_matches(subject: dict[str, Any], user: UserInfo, binding: dict[str, Any]) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.username)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding["metadata"].get("namespace", "")
        return user.username == f"system:serviceaccount:{ns}:{name}"
    return False


def _rule_matches(rule: dict[str, Any], attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.is_resource:
        return any(
            u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1]))
            for u in rule.get("nonResourceURLs") or []
        )
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.api_group not in groups:
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    if not any(
        r in ("*", combined) or (attrs.subresource and r == f"*/{attrs.subresource}") for r in resources
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def forbidden(user: UserInfo, attrs: Attributes) -> ApiError:
    """403 worded as the real server words an RBAC denial."""
    who = f'User "{user.username}"'
    if not attrs.is_resource:
        return ApiError(403, f'forbidden: {who} cannot {attrs.verb} path "{attrs.path}"', details={})
    target = qualified(attrs.resource, attrs.api_group)
    subject = f'{target} "{attrs.name}"' if attrs.name else target
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    message = (
        f'{subject} is forbidden: {who} cannot {attrs.verb} resource "{combined}" '
        f'in API group "{attrs.api_group}" {scope}'
    )
    details: dict[str, Any] = {"kind": attrs.resource}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    return ApiError(403, message, details=details)
