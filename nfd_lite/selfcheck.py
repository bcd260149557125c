"""Is the admission policy enforced? Without it, RBAC alone lets this writer's token change any Node,
taints and spec included, and nothing would say so.

The check asks the server about the properties themselves, each by a server-side dry run (``dryRun=All``:
admission runs, nothing is stored) of a patch that RBAC allows and only the policy refuses:

- a label on another Node (one the token can list; skipped, and said so, on a one-node cluster),
- a label in a namespace reserved for Kubernetes on its own Node,
- a taint on its own Node.

Each must be refused by this writer's own policy, recognised by its name and its binding's (the same
name, as in rbac/ and the chart): a policy by another name that happens to refuse a probe says nothing
about the properties ours enforces. First, a label this writer may set is sent to its own Node, also as
a dry run, and must be admitted: the label on the other Node differs from it only by the Node, so its
refusal can only be the policy's rule about Nodes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from nfd_lite.apierrors import ApiError, Forbidden, policy_denial
from nfd_lite.client import NodeApi
from nfd_lite.policy import Policy
from nfd_lite.reconciler import OWNED_ANNOTATION

log = logging.getLogger(__name__)

POLICY_ENV = "NFD_LITE_ADMISSION_POLICY"  # the chart sets it to its policy's release-scoped name
DEFAULT_POLICY = "gpu-labeller-nfd-lite"  # as rbac/admission-policy.yaml names the policy and its binding

PROBE_NAME = "admission-probe"  # the probe label's name, under the writer's first allowed prefix
RESERVED_PROBE = "node-role.kubernetes.io/gpu-labeller-admission-probe"
TAINT_PROBE = "gpu-labeller.io/admission-probe"
PROBE_VALUE = "must-be-refused"

# The properties the policy must enforce, as the check names them when one is not.
OTHER_NODES = "writes to other Nodes"
RESERVED_LABELS = "labels reserved for Kubernetes"
TAINTS = "taints"


class PolicyNotEnforced(Exception):
    """The server admitted a request the admission policy must refuse, or something other than that
    policy refused it (so whether the policy would have cannot be told)."""


def expected_policy() -> str:
    """The name of this writer's policy and its binding: env NFD_LITE_ADMISSION_POLICY, else rbac/'s."""
    return os.environ.get(POLICY_ENV) or DEFAULT_POLICY


def check_policy(api: NodeApi, policy: Policy | None = None, expected: str | None = None) -> None:
    """Return if the policy named ``expected`` (default: ``expected_policy()``) refused every probe; raise
    PolicyNotEnforced naming each property that was admitted or refused by something else, and the ApiError
    itself for anything that is not a policy's answer (unreachable, RBAC, a webhook), or for any refusal of
    the label this writer may set, so the caller's retry policy and error reporting apply as to any
    request. ``policy``'s first allowed prefix names the probe label (default: nfd-lite's defaults)."""
    name = expected or expected_policy()
    prefix = (policy or Policy()).allow_prefixes[0]
    own = api.get_node()
    own_labels = _labels(own)
    allowed = _absent(prefix + PROBE_NAME, own_labels)
    api.patch_node(_label_patch(own, allowed), dry_run=True)

    findings: list[str] = []
    other = _other_node(api)
    if other is not None:
        other_name = str(other["metadata"]["name"])
        key = _absent(allowed, own_labels, _labels(other))
        body = _label_patch(other, key)
        findings += _unless_refused(
            name, OTHER_NODES, f"a label on Node {other_name}", lambda: api.probe_other_node(other_name, body)
        )
    reserved = _absent(RESERVED_PROBE, own_labels)
    reserved_body = _label_patch(own, reserved)
    findings += _unless_refused(
        name,
        RESERVED_LABELS,
        f"label {reserved} on this Node ({api.node_name})",
        lambda: api.patch_node(reserved_body, dry_run=True),
    )
    taint_body = {"spec": {"taints": _with_probe_taint(own)}}
    findings += _unless_refused(
        name,
        TAINTS,
        f"a taint on this Node ({api.node_name})",
        lambda: api.patch_node(taint_body, dry_run=True),
    )
    if findings:
        raise PolicyNotEnforced(
            f"the admission policy '{name}' that fences this writer is not enforced on this cluster: "
            + "; ".join(findings)
            + " (dry runs: nothing was stored), so RBAC alone would let this token do that: install "
            "rbac/admission-policy.yaml (chart: admissionPolicy.enabled=true; Kubernetes >= 1.30), set "
            f"{POLICY_ENV} to the policy's name if it is installed under another (its binding named alike), "
            "or accept the risk explicitly with --allow-without-admission-policy"
        )


def _unless_refused(expected: str, prop: str, request: str, send: Callable[[], object]) -> list[str]:
    """[] if the policy named ``expected`` refused ``send()``; else one finding naming ``prop``."""
    try:
        send()
    except ApiError as err:
        denial = policy_denial(err.message)
        if denial is None:
            raise
        if denial.policy == expected and denial.binding in (None, expected):
            return []
        return [f"{prop} are not refused by it: {request} was refused by {denial}, not by '{expected}'"]
    return [f"{prop} are not refused: {request} was admitted"]


def _other_node(api: NodeApi) -> dict[str, Any] | None:
    """A Node to probe other than this one, or None (logged: that property is not checked, and why)."""
    try:
        other = api.other_node()
    except Forbidden as err:
        if policy_denial(err.message) is not None:
            raise
        reason = f"this token may not list Nodes ({err.message})"
    else:
        if other is not None:
            return other
        reason = "there is no other Node (a one-node cluster)"
    log.warning(
        "admission self-check: %s is not checked, as %s; it is checked again at the next start and after "
        "a long API outage",
        OTHER_NODES,
        reason,
    )
    return None


def _labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def _label_patch(node: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A new label as a real write sends it: recorded in the ownership annotation (the policy refuses a
    created label it does not list), so that only the rule a probe is about can refuse it."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    owned = {part.strip() for part in str(annotations.get(OWNED_ANNOTATION, "")).split(",") if part.strip()}
    return {
        "metadata": {
            "labels": {key: PROBE_VALUE},
            "annotations": {OWNED_ANNOTATION: ",".join(sorted(owned | {key}))},
        }
    }


def _absent(key: str, *labels: Mapping[str, str]) -> str:
    """``key``, or ``key`` with a number appended, that none of ``labels`` carries: the probe adds a
    label, so the policy's rules about changing an existing one never decide the answer."""
    candidate, n = key, 0
    while any(candidate in each for each in labels):
        n += 1
        candidate = f"{key}-{n}"
    return candidate


def _with_probe_taint(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Node's taints with the probe's added (or, if already there, removed): a change either way."""
    taints: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    kept = [t for t in taints if t.get("key") != TAINT_PROBE]
    if len(kept) != len(taints):
        return kept
    return [*taints, {"key": TAINT_PROBE, "value": PROBE_VALUE, "effect": "NoSchedule"}]
