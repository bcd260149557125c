"""Which label keys nfd-lite may own: an allow-list of key prefixes and a deny-list nobody can lift.

``kubernetes.io`` and ``k8s.io`` and every subdomain of them are reserved for Kubernetes core components
(``node-role.kubernetes.io``, ``node.kubernetes.io``, ...); a node agent writing them could steer the
scheduler or impersonate node roles. The one exception is ``feature.node.kubernetes.io``, the namespace
NFD publishes node features under.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nfd_lite.parser import Feature, Rejection

DEFAULT_ALLOW_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")
_RESERVED = ("kubernetes.io", "k8s.io")
_EXCEPTION = "feature.node.kubernetes.io"

RESERVED = "reserved-namespace"
NOT_ALLOWED = "not-allowed"


def reserved(namespace: str) -> bool:
    """True for kubernetes.io, k8s.io and their subdomains, except feature.node.kubernetes.io."""
    namespace = namespace.lower()
    if namespace == _EXCEPTION:
        return False
    return any(namespace == top or namespace.endswith("." + top) for top in _RESERVED)


def normalize_prefix(prefix: str) -> str:
    """``nvidia.com`` and ``nvidia.com/`` both mean the ``nvidia.com`` namespace."""
    return prefix if prefix.endswith("/") else prefix + "/"


def prefix_problem(prefix: str) -> str | None:
    """Why an --allow-prefix value cannot be used, or None."""
    prefix = normalize_prefix(prefix)
    namespace = prefix.split("/", 1)[0]
    if not namespace:
        return f"allow-prefix {prefix!r} has no namespace"
    if reserved(namespace):
        return f"allow-prefix {prefix!r} is reserved for Kubernetes and cannot be allowed"
    return None


@dataclass(frozen=True)
class Policy:
    allow_prefixes: tuple[str, ...] = DEFAULT_ALLOW_PREFIXES

    @classmethod
    def from_prefixes(cls, prefixes: Iterable[str]) -> Policy:
        return cls(tuple(normalize_prefix(p) for p in prefixes))

    def problem(self, key: str) -> tuple[str, str] | None:
        """(reason code, detail) when ``key`` may not be written, else None."""
        namespace, slash, _ = key.rpartition("/")
        if slash and reserved(namespace):
            return RESERVED, f"namespace {namespace!r} is reserved for Kubernetes"
        if not any(key.startswith(prefix) for prefix in self.allow_prefixes):
            return NOT_ALLOWED, f"key is outside the allowed prefixes {', '.join(self.allow_prefixes)}"
        return None

    def may_own(self, key: str) -> bool:
        return self.problem(key) is None

    def filter(self, features: dict[str, Feature]) -> tuple[dict[str, Feature], list[Rejection]]:
        kept: dict[str, Feature] = {}
        rejected: list[Rejection] = []
        for key, feature in features.items():
            if found := self.problem(key):
                rejected.append(Rejection(feature.file, feature.line, key, found[0], found[1]))
            else:
                kept[key] = feature
        return kept, rejected
