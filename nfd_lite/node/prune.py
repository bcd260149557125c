"""``nfd-lite prune``: remove every label this writer owns and its ownership record, then exit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import AccessDenied, AdmissionRefused, NotFound
from nfd_lite.api.retry import RetryPolicy
from nfd_lite.files.policy import Policy
from nfd_lite.node.held import HeldKeys
from nfd_lite.node.reconciler import NodeState, plan

PRUNE_MAX_BACKOFF = 5.0  # a one-off command: give up within seconds, not minutes


@dataclass
class Pruned:
    """What prune removed, and what the admission policy refused to let it remove (key -> the server's
    message): those labels stay on the Node, recorded as owned, so a later prune can take them."""

    removed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def prune(api: NodeApi, policy: Policy, attempts: int = 5) -> Pruned:
    """Remove every owned label and the ownership annotation. A missing credential, permission or Node is
    reported at once: retrying cannot fix it. Labels the admission policy refuses to let go, naming them,
    are left in place and the rest removed, instead of nothing at all."""
    held = HeldKeys(retry_after=math.inf)  # within one command, a refused label is not tried again
    pruned = Pruned()

    def once() -> None:
        node = NodeState.from_object(api.get_node())
        # Read once; around a refusal naming labels of the patch, the rest is planned and sent at once.
        while (result := plan({}, node, may_own=policy.may_own, held=held.keys())).patch is not None:
            try:
                api.patch_node(result.patch)
                break
            except AdmissionRefused as err:
                if not held.hold_refused(err, result.touched):
                    raise  # the whole patch's refusal, not one of its labels'
        pruned.removed = result.removed
        pruned.refused = {key: held.reasons[key] for key in sorted(held.keys())}

    retry = RetryPolicy(max_backoff=PRUNE_MAX_BACKOFF, final=(AccessDenied, NotFound))
    retry.call(once, "prune", attempts)
    return pruned
