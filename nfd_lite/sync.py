"""One sync pass: check the admission policy when due, read the Node if needed, plan, report conflicts,
patch, record metrics. Runs on the main loop's thread only."""

from __future__ import annotations

import logging
import time

from nfd_lite.client import ApiError, NodeApi
from nfd_lite.features import FeatureState
from nfd_lite.inbox import Inbox
from nfd_lite.metrics import WriterMetrics
from nfd_lite.parser import printable
from nfd_lite.reconciler import NodeState, Plan, plan
from nfd_lite.retry import Outage
from nfd_lite.selfcheck import check_policy
from nfd_lite.settings import WriterSettings

log = logging.getLogger(__name__)


def plan_pass(
    features: FeatureState, node: NodeState, settings: WriterSettings, *, allow_removal: bool
) -> Plan:
    """What a pass sends to ``node``: the feature files' labels as last read, under the settings' policy."""
    return plan(
        features.labels(),
        node,
        overwrite=settings.overwrite,
        allow_removal=allow_removal,
        may_own=settings.policy.may_own,
    )


class NodeSync:
    def __init__(
        self,
        settings: WriterSettings,
        api: NodeApi,
        metrics: WriterMetrics,
        features: FeatureState,
        inbox: Inbox,
        outage: Outage,
    ) -> None:
        self.settings = settings
        self.api = api
        self.metrics = metrics
        self.features = features
        self.inbox = inbox
        self.outage = outage
        self.synced = False
        self.syncs = 0  # completed sync passes (with or without a write)
        self._started = time.monotonic()
        self._conflicts: set[tuple[str, str]] = set()
        self._policy_checked = False
        self._need_read = False

    def _allow_removal(self) -> bool:
        grace_over = time.monotonic() - self._started >= self.settings.startup_grace
        return self.features.files_seen or grace_over

    def _report(self, result: Plan) -> None:
        current = {(c.key, c.theirs) for c in result.conflicts}
        for conflict in result.conflicts:
            if (conflict.key, conflict.theirs) not in self._conflicts:
                self.metrics.conflicts.inc()
                log.warning(
                    "conflict: %s is already set by someone else; left alone (--overwrite takes it)",
                    printable(conflict.key),
                )
        self._conflicts = current

    def once(self) -> None:
        if self.outage.take_long_one():
            self._policy_checked = False
        if self.settings.require_admission_policy and not self._policy_checked:
            check_policy(self.api)  # before the first write, and again after a long outage
            self._policy_checked = True
        if self._need_read or self.inbox.node is None:
            self.inbox.node_seen(self.api.get_node())
            self._need_read = False
        node = self.inbox.take_node()
        assert node is not None
        result = plan_pass(self.features, node, self.settings, allow_removal=self._allow_removal())
        self._report(result)
        if result.patch is not None:
            try:
                updated = self.api.patch_node(result.patch)
            except ApiError:
                self._need_read = True  # stale (409) or unknown outcome: plan again from a fresh read
                raise
            self.metrics.writes.inc()
            log.info(
                "patched node %s: set %s, removed %s",
                self.settings.node_name,
                result.set_labels or "{}",
                result.removed or "[]",
            )
            self.inbox.node_seen(updated, own_write=True)
        self.metrics.owned.set(len(result.owned))
        self.metrics.last_sync.set(time.time())
        self.synced = True
        self.syncs += 1
