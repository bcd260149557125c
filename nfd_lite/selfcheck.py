"""Is the admission policy enforced? Without it, RBAC alone lets this writer's token change any Node,
taints and spec included, and nothing would say so. The check sends a server-side dry run (nothing is
stored) of a patch that RBAC allows and only the policy refuses: an annotation other than the ownership
record, on the writer's own Node."""

from __future__ import annotations

from nfd_lite.apierrors import AdmissionRefused
from nfd_lite.client import NodeApi

PROBE_ANNOTATION = "gpu-labeller.io/admission-probe"
POLICY_MISSING = (
    "the admission policy that fences this writer to its own Node and labels is not enforced on this "
    "cluster (a dry-run patch it must refuse was accepted), so RBAC alone would let this token change any "
    "Node: install rbac/admission-policy.yaml (chart: admissionPolicy.enabled=true; Kubernetes >= 1.30), "
    "or accept the risk explicitly with --allow-without-admission-policy"
)


class PolicyNotEnforced(Exception):
    """The server accepted a request the admission policy must refuse."""


def check_policy(api: NodeApi) -> None:
    """Return if the policy refused the probe; raise PolicyNotEnforced if the server accepted it, and the
    ApiError itself for anything else (unreachable, RBAC, another admission controller), so the caller's
    retry policy and error reporting apply as to any request."""
    try:
        api.patch_node({"metadata": {"annotations": {PROBE_ANNOTATION: "must-be-refused"}}}, dry_run=True)
    except AdmissionRefused:
        return
    raise PolicyNotEnforced(POLICY_MISSING)
