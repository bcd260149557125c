"""One sync pass: check the admission policy when due, read the newest Node known, plan, report
conflicts, patch, record metrics; each attempt under the retry policy. Runs on the main loop's thread only.

An attempt is NFD's updater-pool shape, get, update and requeue in one function: read the Node, plan
with a pure function of (Node, desired labels, held-back labels), send, and around a refusal of the
admission policy that names labels of the patch, hold those back and read, plan and send the rest at
once. Only reading touches the ``Inbox`` or the server; planning does neither.

The newest Node known is the newer of the one the watch delivered (through the ``Inbox``) and the answers
to this writer's own requests: a read when it has no Node yet or a patch failed, and each patch's answer.
Those answers are kept here, not sent round through the ``Inbox``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import AdmissionRefused, ApiError
from nfd_lite.api.outage import Outage
from nfd_lite.api.retry import REFUSAL_REPEAT_AFTER, RetryPolicy, Stopped
from nfd_lite.api.throttle import TokenBucket
from nfd_lite.files.features import FeatureState
from nfd_lite.files.rejections import printable
from nfd_lite.metrics import WriterMetrics
from nfd_lite.node.held import HeldKeys
from nfd_lite.node.inbox import Inbox
from nfd_lite.node.reconciler import NodeState, Plan, plan
from nfd_lite.node.selfcheck import AdmissionCheck
from nfd_lite.settings import WriterSettings
from saidonce import SaidOnce

log = logging.getLogger(__name__)


def plan_pass(
    desired: Mapping[str, str],
    node: NodeState,
    settings: WriterSettings,
    *,
    allow_removal: bool,
    held: frozenset[str] = frozenset(),
) -> Plan:
    """What a pass sends to ``node`` for the ``desired`` labels (the feature files' as last read), under
    the settings' policy, leaving ``held`` keys (refused by the admission policy) as they are. Pure: no
    request, no Inbox. ``--dry-run`` plans with it too, against a Node that carries nothing, and sends
    nothing."""
    return plan(
        desired,
        node,
        overwrite=settings.overwrite,
        allow_removal=allow_removal,
        may_own=settings.policy.may_own,
        held=held,
    )


SHOWN_KEYS = 10  # keys a "patched node" line names; the rest are counted


def _keys(keys: Iterable[str]) -> str:
    """Label keys for a log line, in order: the first SHOWN_KEYS, then how many more."""
    listed = sorted(keys)
    shown = ", ".join(printable(k) for k in listed[:SHOWN_KEYS])
    more = len(listed) - SHOWN_KEYS
    return f"{len(listed)} ({shown}{f' and {more} more' if more > 0 else ''})" if listed else "0"


class NodeSync:
    def __init__(
        self,
        *,
        settings: WriterSettings,
        api: NodeApi,
        features: FeatureState,
        inbox: Inbox,
        retry: RetryPolicy,
        outage: Outage,
        metrics: WriterMetrics,
    ) -> None:
        self.settings = settings
        self.api = api
        self.features = features
        self.inbox = inbox
        self.retry = retry
        self.outage = outage
        self.metrics = metrics
        self.synced = False  # one pass has completed (/readyz)
        self._node: NodeState | None = None  # the newest Node known: watched, read or patched
        self._read_first = False  # a patch failed (409, or no answer): read the Node before planning again
        self._started = time.monotonic()
        self._conflicts: set[tuple[str, str]] = set()
        self.admission = AdmissionCheck(
            api, settings.policy, settings.admission_check_interval, metrics.admission_policy_enforced
        )
        self.writes = TokenBucket(settings.write_rate, settings.write_burst)
        self.held = HeldKeys(settings.slow_retry)  # labels the admission policy refused, tried again slowly
        self._held_said: SaidOnce[str] = SaidOnce(repeat_after=REFUSAL_REPEAT_AFTER)

    def once(self, attempts: int | None = None) -> None:
        """One pass, tried again under the retry policy until it completes, ``attempts`` are used up (the
        last failure is raised) or the writer stops (Stopped)."""
        self.retry.call(self._attempt, "patch", attempts)

    def _attempt(self) -> None:
        """Get, update, requeue: read the newest Node, plan, and send; after a wait for the write rate,
        read and plan again (the watch may have brought a newer Node meanwhile); after a refusal that
        names labels of the patch, hold those back and read, plan and send the rest at once. A failure
        ends the attempt (the retry policy decides what comes next)."""
        self._check_policy_when_due()
        result = self._plan(self._newest_node())
        if result.patch is not None and self._waited_for_write_rate():
            result = self._plan(self._newest_node())
        answer: NodeState | None = None
        while result.patch is not None:
            self.metrics.labels_current.set(0)  # until the write lands
            try:
                answer = self._send(result.patch)
                break
            except AdmissionRefused as err:
                if not self.held.hold_refused(err, result.touched):
                    raise  # the whole patch's refusal, not one of its labels'
                self.metrics.api_errors.labels(err.code).inc()
            result = self._plan(self._newest_node())
        self._report(result)
        self._report_held()
        if answer is not None:
            self._learn(answer)
            self.metrics.writes.inc()
            # Keys only: a value comes from whoever writes the feature files.
            log.info(
                "patched node %s: set %s, removed %s",
                self.settings.node_name,
                _keys(result.set_labels),
                _keys(result.removed),
            )
        self.metrics.owned.set(len(result.owned))
        self.metrics.labels_current.set(0 if result.conflicts or self.held.keys() else 1)
        self.metrics.last_sync.set(time.time())
        self.metrics.syncs.inc()
        self.synced = True

    def _waited_for_write_rate(self) -> bool:
        """A write is due: wait for the token bucket if it is over the write rate. Whether it waited."""
        delay = self.writes.delay()
        if delay <= 0:
            return False
        if self.retry.stop.wait(delay):
            raise Stopped
        return True

    def next_retry(self) -> float | None:
        """When (monotonic) labels the admission policy refused are due to be tried again, if any are."""
        return self.held.next_retry()

    def _plan(self, node: NodeState) -> Plan:
        """The plan for ``node`` from the files as last read and the keys held back now."""
        return plan_pass(
            self.features.labels(),
            node,
            self.settings,
            allow_removal=self._allow_removal(),
            held=self.held.keys(),
        )

    def next_policy_check(self) -> float | None:
        """When (monotonic) the admission policy is due to be checked again, if it is checked."""
        return self.admission.next_check() if self.settings.require_admission_policy else None

    def _check_policy_when_due(self) -> None:
        """Before the first write (which waits for it to pass), after a long outage and periodically. A
        later check that cannot be made (no answer, not a policy's answer) leaves its last verdict standing
        and does not hold up the pass: the writer's own requests meet the same server anyway."""
        if not self.settings.require_admission_policy:
            return
        if self.outage.take_long_one():
            self.admission.due_now()
        if not self.admission.passed_once:
            self.admission.run_when_due(lambda: self._newest_node().obj)
            return
        try:
            self.admission.run_when_due(lambda: self._newest_node().obj)
        except ApiError as err:
            self.metrics.api_errors.labels(err.code).inc()
            self.outage.failed(err)
            self.admission.retry_in(self.settings.slow_retry)
            log.warning(
                "admission self-check: could not check the policy again (%s: %s); the last result stands, "
                "tried again in %.0f s",
                err.code,
                err.message,
                self.settings.slow_retry,
            )

    def _newest_node(self) -> NodeState:
        """The newest Node known, taking the watched one from the Inbox; read from the server when none
        is known yet or the last patch failed (what it was planned against may be stale)."""
        self._learn(self.inbox.take_node())
        if self._node is None or self._read_first:
            self._learn(NodeState.from_object(self.api.get_node()))
            self._read_first = False
        assert self._node is not None
        return self._node

    def _learn(self, node: NodeState | None) -> None:
        if node is not None and node.supersedes(self._node):
            self._node = node

    def _send(self, patch: dict[str, Any]) -> NodeState:
        """The patch's answer: the Node as this write left it."""
        self.writes.take()
        try:
            return NodeState.from_object(self.api.patch_node(patch))
        except ApiError:
            self._read_first = True
            raise

    def _allow_removal(self) -> bool:
        grace_over = time.monotonic() - self._started >= self.settings.startup_grace
        return self.features.files_seen or grace_over

    def _report_held(self) -> None:
        """Each refused label once when it is first held back (and every REFUSAL_REPEAT_AFTER while it
        stays refused), with the server's message; and once when none is held any more."""
        held = self.held.keys()
        self.metrics.refused.set(len(held))
        change = self._held_said.update(sorted(held))
        by_reason: dict[str, list[str]] = {}
        for key in change.new:
            by_reason.setdefault(self.held.reasons[key], []).append(key)
        for reason, keys in by_reason.items():
            log.error(
                "the admission policy refused %s on node %s; they are held back, the other labels are "
                "written, and they are tried again every %.0f s (%s)",
                _keys(keys),
                self.settings.node_name,
                self.held.retry_after,
                reason,
            )
        if change.recovered:
            log.info("the admission policy admits every label this writer sets again")

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
