"""One sync pass: check the admission policy when due, plan against the newest Node known, report
conflicts, patch, record metrics; each attempt under the retry policy. Runs on the main loop's thread only.

The newest Node known is the newer of the one the watch delivered (through the ``Inbox``) and the answers
to this writer's own requests: a read when it has no Node yet or a patch failed, and each patch's answer.
Those answers are kept here, not sent round through the ``Inbox``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import AdmissionRefused, ApiError
from nfd_lite.api.retry import REFUSAL_REPEAT_AFTER, Outage, RetryPolicy, Stopped
from nfd_lite.api.throttle import TokenBucket
from nfd_lite.files.features import FeatureState
from nfd_lite.files.rejections import printable
from nfd_lite.metrics import WriterMetrics
from nfd_lite.node.held import HeldKeys, send_around_refusals
from nfd_lite.node.inbox import Inbox
from nfd_lite.node.reconciler import NodeState, Plan, plan
from nfd_lite.node.selfcheck import AdmissionCheck
from nfd_lite.settings import WriterSettings
from saidonce import SaidOnce

log = logging.getLogger(__name__)


def plan_pass(
    features: FeatureState,
    node: NodeState,
    settings: WriterSettings,
    *,
    allow_removal: bool,
    held: frozenset[str] = frozenset(),
) -> Plan:
    """What a pass sends to ``node``: the feature files' labels as last read, under the settings' policy,
    leaving ``held`` keys (refused by the admission policy) as they are. ``--dry-run`` plans with it too,
    against a Node that carries nothing, and sends nothing."""
    return plan(
        features.labels(),
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
        self._check_policy_when_due()
        self._wait_for_write_rate()
        result, answer = send_around_refusals(self._plan, self._send, self.held, self._refused_now)
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
        self.metrics.last_sync.set(time.time())
        self.metrics.syncs.inc()
        self.synced = True

    def _wait_for_write_rate(self) -> None:
        """A write is due but over the write rate: wait for the token bucket. The pass plans again after
        the wait, against what is newest by then."""
        if self._plan(self.held.keys()).patch is None:
            return
        delay = self.writes.delay()
        if delay > 0 and self.retry.stop.wait(delay):
            raise Stopped

    def next_retry(self) -> float | None:
        """When (monotonic) labels the admission policy refused are due to be tried again, if any are."""
        return self.held.next_retry()

    def _plan(self, held: frozenset[str] = frozenset()) -> Plan:
        node = self._newest_node()
        return plan_pass(self.features, node, self.settings, allow_removal=self._allow_removal(), held=held)

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
            self.admission.run_when_due()
            return
        try:
            self.admission.run_when_due()
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

    def _refused_now(self, err: AdmissionRefused) -> None:
        self.metrics.api_errors.labels(err.code).inc()

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
