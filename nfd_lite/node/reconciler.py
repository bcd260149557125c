"""Pure reconciliation: desired labels + the Node as read -> the smallest merge patch, or None.

Ownership is recorded on the Node itself in the annotation ``gpu-labeller.io/owned-labels`` (sorted,
comma-separated keys), so a restarted writer knows what it may remove without any local state. This module
is the one place that reads and writes that record (``read_record``, ``write_record``): a sync pass (its
owned-labels metric included), ``--dry-run`` and ``prune`` (the plan of nothing desired) go through
``plan``, and the admission self-check's probe label through the two functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OWNED_ANNOTATION = "gpu-labeller.io/owned-labels"


@dataclass(frozen=True)
class NodeState:
    """The parts of a Node a plan looks at. The defaults are a Node that carries nothing and was never
    read (what ``--dry-run`` plans against)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""
    # The Node as the server sent it, for the admission self-check's probes (taints, managedFields).
    obj: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_object(cls, node: Mapping[str, Any]) -> NodeState:
        meta = node.get("metadata") or {}
        return cls(
            dict(meta.get("labels") or {}),
            dict(meta.get("annotations") or {}),
            str(meta.get("resourceVersion") or ""),
            node,
        )

    def supersedes(self, known: NodeState | None) -> bool:
        """Whether this Node may replace ``known`` as the newest one seen. resourceVersions are opaque, but
        when both are integers an older one must not win."""
        if known is None:
            return True
        mine, theirs = self.resource_version, known.resource_version
        if mine.isdigit() and theirs.isdigit():
            return int(mine) >= int(theirs)
        return True


@dataclass(frozen=True)
class Conflict:
    key: str
    theirs: str
    ours: str


@dataclass
class Plan:
    patch: dict[str, Any] | None
    owned: frozenset[str]  # the keys the ownership record lists once ``patch`` is applied
    conflicts: list[Conflict] = field(default_factory=list)
    set_labels: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    @property
    def touched(self) -> frozenset[str]:
        """The label keys the patch names: the labels it sets or removes and those its record lists."""
        labels = (self.patch or {}).get("metadata", {}).get("labels") or {}
        return frozenset(labels) | self.owned if self.patch is not None else frozenset()


def read_record(annotations: Mapping[str, Any]) -> frozenset[str]:
    """Every key the ownership record in ``annotations`` lists, as written there."""
    raw = str(annotations.get(OWNED_ANNOTATION) or "")
    return frozenset(key for key in (part.strip() for part in raw.split(",")) if key)


def write_record(keys: Iterable[str]) -> str | None:
    """The ownership record listing ``keys`` (sorted, comma-separated); None, which removes the
    annotation, when there are none."""
    return ",".join(sorted(keys)) or None


def _owned_keys(annotations: Mapping[str, str], may_own: Callable[[str], bool]) -> set[str]:
    """Keys listed in the ownership annotation that ``may_own`` accepts (``Policy.may_own``: everything but
    reserved-namespace and control labels). A key under a prefix that is no longer allowed stays owned, so it
    is removed rather than orphaned; a reserved or control label is never treated as owned, so an edited
    annotation cannot make the writer delete it, and it drops out of the record on the next write."""
    return {key for key in read_record(annotations) if may_own(key)}


def _body(node: NodeState, labels: dict[str, str | None], owned: set[str]) -> dict[str, Any]:
    # The resourceVersion planned against is the patch's precondition; a Node never read offers none.
    meta: dict[str, Any] = {"resourceVersion": node.resource_version} if node.resource_version else {}
    meta["labels"] = labels
    meta["annotations"] = {OWNED_ANNOTATION: write_record(owned)}
    return {"metadata": meta}


def plan(
    desired: Mapping[str, str],
    node: NodeState,
    *,
    overwrite: bool = False,
    allow_removal: bool = True,
    may_own: Callable[[str], bool],
    held: frozenset[str] = frozenset(),
) -> Plan:
    """What to send so the Node carries ``desired`` for the keys this writer owns.

    - an owned key with a different (or no) value is set again: that is drift repair;
    - a key that exists but is not owned is left alone, unless ``overwrite``: with the value desired it is
      another manager's label that says the same (the GPU Operator's ``gpu.present``), nothing to report
      and not taken; with another value it is a conflict;
    - owned keys no longer desired are removed, unless ``allow_removal`` is False (start-up grace);
    - a ``held`` key (one the admission policy refused) is left as the Node has it, label and record;
    - the record lists only labels the Node carries once the patch is applied: a key whose label is gone
      leaves it, in grace and held too (the admission policy refuses a record that lists a missing label,
      which would let a token later take over a label of that name someone else sets).

    Nothing desired is ``prune``: every owned label on the Node goes, and the record with them.
    """
    owned = _owned_keys(node.annotations, may_own)
    changes: dict[str, str | None] = {}
    conflicts: list[Conflict] = []
    new_owned: set[str] = set()
    for key in held & owned:
        if key in node.labels:
            new_owned.add(key)
    for key, value in desired.items():
        if key in held:
            continue
        current = node.labels.get(key)
        if key not in owned and current is not None and not overwrite:
            if current != value:
                conflicts.append(Conflict(key, current, value))
            continue
        new_owned.add(key)
        if current != value:
            changes[key] = value
    removed: list[str] = []
    for key in sorted(owned - desired.keys() - held):
        if key not in node.labels:
            continue  # already gone: only its key leaves the record
        if not allow_removal:
            new_owned.add(key)
        else:
            changes[key] = None
            removed.append(key)
    recorded = node.annotations.get(OWNED_ANNOTATION)
    return Plan(
        patch=_body(node, changes, new_owned) if changes or recorded != write_record(new_owned) else None,
        owned=frozenset(new_owned),
        conflicts=conflicts,
        set_labels={k: v for k, v in changes.items() if v is not None},
        removed=removed,
    )
