"""``nfd-lite prune``: remove every label this writer owns and its ownership record, then exit."""

from __future__ import annotations

from nfd_lite.apierrors import AccessDenied, NotFound
from nfd_lite.client import NodeApi
from nfd_lite.policy import Policy
from nfd_lite.reconciler import NodeState, plan
from nfd_lite.retry import RetryPolicy

PRUNE_MAX_BACKOFF = 5.0  # a one-off command: give up within seconds, not minutes


def prune(api: NodeApi, policy: Policy, attempts: int = 5) -> list[str]:
    """Remove every owned label and the ownership annotation; returns the removed keys. A missing
    credential, permission or Node is reported at once: retrying cannot fix it."""
    removed: list[str] = []

    def once() -> None:
        result = plan({}, NodeState.from_object(api.get_node()), may_own=policy.may_own)
        removed[:] = result.removed
        if result.patch is not None:
            api.patch_node(result.patch)

    retry = RetryPolicy(max_backoff=PRUNE_MAX_BACKOFF, final=(AccessDenied, NotFound))
    retry.call(once, "prune", attempts)
    return removed
