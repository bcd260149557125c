"""Which label keys nfd-lite may own: allow-lists of prefixes and key patterns, deny-lists nobody can lift.

``kubernetes.io`` and ``k8s.io`` and every subdomain of them are reserved for Kubernetes core components
(``node-role.kubernetes.io``, ``node.kubernetes.io``, ...); a node agent writing them could steer the
scheduler or impersonate node roles. The one exception is ``feature.node.kubernetes.io``, the namespace
NFD publishes node features under.

Under ``nvidia.com/`` the GPU Operator, the MIG manager, the vGPU device manager, the confidential-computing
manager and the device plugin read labels as *commands* (which operands to deploy, which MIG layout to
apply, which driver upgrade state a node is in). Whoever can write a feature file must not be able to set
those, so they are denied outright, and only the label families gfd itself writes are admitted by default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

import k8slabels
from nfd_lite.files.labelline import LabelLine
from nfd_lite.files.rejections import Rejection, printable

DEFAULT_ALLOW_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")
_RESERVED = ("kubernetes.io", "k8s.io")
_EXCEPTION = "feature.node.kubernetes.io"

# Key patterns (``*`` matches any characters) admitted by default: the label families gfd writes
# (docs/labels.md) and everything NFD publishes. Extended with --allow-key.
DEFAULT_ALLOW_KEYS = (
    "nvidia.com/gpu.*",  # gpu.count, gpu.product, gpu.count.<model>, gpu.engines.*, renamed gpu.shared.* ...
    "nvidia.com/mig.*",  # mig.capable, mig.strategy
    "nvidia.com/mig-*",  # mig-<profile>.count, .product, ... under the mixed strategy
    "nvidia.com/mps.*",
    "nvidia.com/cuda.*",
    "nvidia.com/vgpu.*",
    "nvidia.com/jetson.*",
    "nvidia.com/gfd.timestamp",
    "feature.node.kubernetes.io/*",
)


@dataclass(frozen=True)
class KeyList:
    """A set of label keys: some named exactly, some by a leading string."""

    exact: tuple[str, ...]
    prefixes: tuple[str, ...]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self.exact or key.startswith(self.prefixes))


# Labels other controllers read as commands. No flag admits them, and nfd-lite never removes them even if
# they are listed in its ownership annotation. The admission policy (rbac/, the chart) mirrors this list.
CONTROL_LABELS = KeyList(
    exact=(
        "nvidia.com/gpu.workload.config",  # GPU Operator: container, vm-passthrough or vm-vgpu
        "nvidia.com/mig.config",  # MIG manager: the MIG layout to apply
        "nvidia.com/mig.config.state",
        "nvidia.com/vgpu.config",  # vGPU device manager: the vGPU types to create
        "nvidia.com/vgpu.config.state",
        "nvidia.com/cc.mode",  # confidential-computing manager
        "nvidia.com/cc.mode.state",
        "nvidia.com/cc.ready.state",
        "nvidia.com/device-plugin.config",  # device plugin: which named config this node uses
    ),
    prefixes=(
        "nvidia.com/gpu.deploy.",  # GPU Operator: which operands run on the node (driver, device-plugin, ...)
        "nvidia.com/gpu-driver-upgrade",  # driver upgrade state machine: -state, .skip, -requested ...
        "nvidia.com/gpu-operator.",  # GPU Operator's own: .state, .driver.owner, .resource-allocation.mode
    ),
)

# The names upstream NFD's built-in sources publish under feature.node.kubernetes.io/ (nfd-worker names
# each "<source>-<feature>", v0.19 pkg/nfd-worker GetFeatureLabels; its local and custom sources add no
# prefix). Other components read them as measured hardware facts: the GPU Operator deploys its driver
# where pci-10de.present is "true" and picks the driver image by system-os_release.ID and VERSION_ID.
# A feature file is not such a measurement, so only an --allow-key pattern that itself names one of
# these prefixes admits them; the default "feature.node.kubernetes.io/*" does not.
NFD_SOURCE_PREFIXES = tuple(
    f"feature.node.kubernetes.io/{source}-"
    for source in ("cpu", "kernel", "memory", "network", "pci", "storage", "system", "usb")
)

RESERVED = "reserved-namespace"
CONTROL = "control-label"
NFD_SOURCE = "nfd-source-label"
NOT_ALLOWED = "not-allowed"
KEY_NOT_ALLOWED = "key-not-allowed"


def reserved(namespace: str) -> bool:
    """True for kubernetes.io, k8s.io and their subdomains, except feature.node.kubernetes.io."""
    namespace = namespace.lower()
    if namespace == _EXCEPTION:
        return False
    return any(namespace == top or namespace.endswith("." + top) for top in _RESERVED)


def _reserved_key(key: str) -> bool:
    namespace, slash, _ = key.rpartition("/")
    return bool(slash) and reserved(namespace)


def normalize_prefix(prefix: str) -> str:
    """``nvidia.com`` and ``nvidia.com/`` both mean the ``nvidia.com`` namespace."""
    return prefix if prefix.endswith("/") else prefix + "/"


def allow_prefix_problem(prefix: str) -> str | None:
    """Why an --allow-prefix value cannot be used, or None: it must be a label prefix (a DNS subdomain)
    followed by "/", as the chart's schema requires of allowPrefixes, and one nfd-lite may be allowed to
    write under (not reserved for Kubernetes)."""
    namespace, slash, rest = prefix.partition("/")
    if not slash or rest or k8slabels.prefix_problem(namespace):
        return (
            f"allow-prefix {printable(prefix)!r} is not a DNS subdomain followed by '/' "
            "(such as example.com/)"
        )
    if reserved(namespace):
        return f"allow-prefix {prefix!r} is reserved for Kubernetes and cannot be allowed"
    return None


def allow_key_problem(pattern: str, prefixes: Iterable[str]) -> str | None:
    """Why an --allow-key pattern cannot be used, or None. A pattern names its namespace literally and
    lies under an allowed prefix, so it can never widen what --allow-prefix admits."""
    chosen = tuple(normalize_prefix(p) for p in prefixes)
    if not pattern.startswith(chosen):
        return f"allow-key {pattern!r} is not under any allowed prefix ({', '.join(chosen)})"
    if _reserved_key(pattern):
        return f"allow-key {pattern!r} is in a namespace reserved for Kubernetes"
    return None


@dataclass(frozen=True)
class Policy:
    allow_prefixes: tuple[str, ...] = DEFAULT_ALLOW_PREFIXES
    allow_keys: tuple[str, ...] = DEFAULT_ALLOW_KEYS

    @classmethod
    def from_prefixes(cls, prefixes: Iterable[str], extra_keys: Iterable[str] = ()) -> Policy:
        """The default key patterns plus ``extra_keys``, under ``prefixes``."""
        return cls(tuple(normalize_prefix(p) for p in prefixes), DEFAULT_ALLOW_KEYS + tuple(extra_keys))

    def problem(self, key: str) -> tuple[str, str] | None:
        """(reason code, detail) when ``key`` may not be written, else None."""
        if _reserved_key(key):
            return RESERVED, "namespace is reserved for Kubernetes"
        if key in CONTROL_LABELS:
            return CONTROL, "a GPU Operator or device-plugin control label; no flag admits it"
        if key.startswith(NFD_SOURCE_PREFIXES) and not any(
            fnmatchcase(key, pattern)
            for pattern in self.allow_keys
            if pattern.startswith(NFD_SOURCE_PREFIXES)
        ):
            return NFD_SOURCE, (
                "a label upstream NFD's own sources publish as a hardware fact; admitted only by an "
                "--allow-key pattern naming its source"
            )
        if not key.startswith(self.allow_prefixes):
            return NOT_ALLOWED, f"key is outside the allowed prefixes {', '.join(self.allow_prefixes)}"
        if not any(fnmatchcase(key, pattern) for pattern in self.allow_keys):
            return KEY_NOT_ALLOWED, "key matches no allowed key pattern (see --allow-key)"
        return None

    @staticmethod
    def may_own(key: str) -> bool:
        """Whether a key listed in the ownership annotation may be treated as this writer's own, so removed
        when no longer desired. Keys under a prefix or pattern that is no longer allowed still qualify (they
        were written by this writer, and must not be orphaned); reserved and control labels never do, so an
        edited annotation cannot make the writer delete them."""
        return not _reserved_key(key) and key not in CONTROL_LABELS

    def filter(self, label_lines: dict[str, LabelLine]) -> tuple[dict[str, LabelLine], list[Rejection]]:
        kept: dict[str, LabelLine] = {}
        rejected: list[Rejection] = []
        for key, label_line in label_lines.items():
            if found := self.problem(key):
                rejected.append(Rejection(label_line.file, label_line.line, printable(key), *found))
            else:
                kept[key] = label_line
        return kept, rejected
