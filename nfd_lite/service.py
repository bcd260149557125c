"""The writer's main loop: feature files and the own-Node watch in, minimal merge patches out.

Threads: watchdog's observer and the Node watch only record what happened and wake the main loop;
the main loop alone reads files and writes to the API, so there is never more than one write in
flight and every write is planned against the latest Node it has seen.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base

from nfd_lite.client import ApiError, NodeApi, explain
from nfd_lite.features import FeatureState
from nfd_lite.health import HealthServer
from nfd_lite.metrics import Metrics
from nfd_lite.parser import Limits, printable
from nfd_lite.policy import Policy
from nfd_lite.reconciler import NodeState, Plan, owned_keys, plan, prune_patch
from nfd_lite.selfcheck import PolicyNotEnforced, check_policy
from nfd_lite.watcher import Debouncer, DirWatcher

log = logging.getLogger(__name__)
T = TypeVar("T")


class Stopped(Exception):
    """The service was asked to stop while waiting."""


@dataclass
class Settings:
    node_name: str
    directories: list[Path]
    policy: Policy = field(default_factory=Policy)
    limits: Limits = field(default_factory=Limits)
    overwrite: bool = False
    poll: bool = False
    resync_interval: float = 60.0
    debounce: float = 0.002
    debounce_cap: float = 0.25
    startup_grace: float = 60.0
    watch_timeout: int = 1800
    metrics_address: str | None = None
    max_backoff: float = 30.0
    slow_retry: float = 30.0  # 401/403 need a human: retry slowly rather than crash-loop or hammer
    require_admission_policy: bool = True  # refuse to write where the policy is not enforced
    policy_recheck_after: float = 300.0  # an API outage this long may have been an upgrade: check again


def now_utc() -> datetime:
    return datetime.now(UTC)


def _newer(candidate: str, known: str) -> bool:
    """resourceVersions are opaque, but when both are integers an older event must not win."""
    if candidate.isdigit() and known.isdigit():
        return int(candidate) >= int(known)
    return True


class Service:
    def __init__(self, settings: Settings, api: NodeApi, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.api = api
        self.metrics = metrics or Metrics()
        self.state = FeatureState(settings.directories, settings.policy, settings.limits)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._debounce = Debouncer(settings.debounce, settings.debounce_cap)
        self._node: NodeState | None = None
        self._node_dirty = False
        self._need_read = False
        self._started = time.monotonic()
        self._conflicts: set[tuple[str, str]] = set()
        self._rejections: set[tuple[str, int, str, str]] = set()
        self._overrides: set[str] = set()
        self._kept: set[tuple[str, str]] = set()
        self._auth_logged: dict[str, float] = {}
        self._watch_rv: str | None = None
        self.synced = False
        self.syncs = 0  # completed sync passes (with or without a write)
        self._bounded = False
        self._policy_checked = False
        self._outage_since: float | None = None
        self.watch_thread: threading.Thread | None = None

    # ---- inputs (any thread) ----

    def notify_files(self) -> None:
        with self._cond:
            self._debounce.note(time.monotonic())
            self._cond.notify()

    def _on_node(self, node: dict[str, Any]) -> None:
        state = NodeState.from_object(node)
        with self._cond:
            if self._node is not None and not _newer(state.resource_version, self._node.resource_version):
                return
            self._node = state
            self._node_dirty = True
            self._cond.notify()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self.api.abort_watch()

    # ---- retries ----

    def _wait(self, retry_state: RetryCallState) -> float:
        # Capped exponential backoff with "equal jitter": half to all of 0.1 s * 2^n, at most max_backoff.
        exponential = wait_exponential(multiplier=0.1, max=self.settings.max_backoff)(retry_state)
        base = exponential * random.uniform(0.5, 1.0)
        err = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(err, ApiError):
            if err.status == 410:
                return 0.0
            if err.status == 409 and retry_state.attempt_number <= 2:
                return random.uniform(0.0, 0.02)  # someone else wrote first: re-read and retry at once
            if err.retry_after is not None:
                return err.retry_after + random.uniform(0.0, 0.05)
            if err.status in (401, 403) and not self._bounded:
                return max(base, self.settings.slow_retry)
        return float(base)

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise Stopped

    def _failed(self, retry_state: RetryCallState, verb: str) -> None:
        err = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(err, ApiError):
            if err.status in (401, 403):
                line = explain(err)
                now = time.monotonic()
                if now - self._auth_logged.get(line, -1e9) > 600:  # one clear line, not one per retry
                    self._auth_logged[line] = now
                    log.error("%s", line)
            elif err.status != 409:
                log.warning("%s failed (%s): %s", verb, err.code, err.message)
        elif err is not None:
            log.exception("%s failed unexpectedly", verb, exc_info=err)

    def _retrying(self, fn: Callable[[], T], verb: str, attempts: int | None = None) -> T:
        stop: stop_base = stop_after_attempt(attempts) if attempts else _StopWhen(self._stop)
        self._bounded = attempts is not None  # a one-shot run reports a 403 instead of waiting on it
        retrying = Retrying(
            # Only failures are retried: Ctrl-C, a stop or a missing policy end the call at once.
            retry=retry_if_exception(
                lambda e: isinstance(e, Exception) and not isinstance(e, Stopped | PolicyNotEnforced)
            ),
            wait=self._wait,
            stop=stop,
            sleep=self._sleep,
            before_sleep=lambda s: self._failed(s, verb),
            reraise=True,
        )

        def counted() -> T:
            try:
                result = fn()
            except ApiError as err:
                self.metrics.api_errors.labels(err.code).inc()
                if err.status == 0 or err.status >= 500:
                    self._outage_since = self._outage_since or time.monotonic()
                raise
            if self._outage_since is not None:
                if time.monotonic() - self._outage_since >= self.settings.policy_recheck_after:
                    self._policy_checked = False
                self._outage_since = None
            return result

        return retrying(counted)

    # ---- reconciling (main thread) ----

    def _allow_removal(self) -> bool:
        return self.state.files_seen or time.monotonic() - self._started >= self.settings.startup_grace

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

    def _rescan(self) -> None:
        """Rescan, and report what changed since the last rescan: each rejection, override and kept file
        is logged once when it appears, never again on later rescans that find it unchanged."""
        state = self.state
        state.rescan(now_utc())
        seen = set()
        for r in state.rejected:
            ident = (r.file, r.line, r.key, r.reason)
            seen.add(ident)
            if ident not in self._rejections:
                self.metrics.rejected.labels(r.reason).inc()
                where = f"{r.file}:{r.line}" if r.line else r.file
                log.warning("rejected %s %s: %s (%s)", where, r.key or "-", r.reason, r.detail)
        self._rejections = seen
        overrides = {o.message() for o in state.overrides}
        for message in sorted(overrides - self._overrides):
            log.warning("%s", message)
        self._overrides = overrides
        kept = {(k.file, k.reason) for k in state.kept}
        for file, reason in sorted(kept - self._kept):
            log.warning("%s: %s; keeping its last good content", file, reason)
        self._kept = kept
        for cap, count in state.capped.items():
            self.metrics.capped.labels(cap).set(count)

    def _sync_once(self) -> None:
        if self.settings.require_admission_policy and not self._policy_checked:
            check_policy(self.api)  # before the first write, and again after a long outage
            self._policy_checked = True
        if self._need_read or self._node is None:
            self._on_node(self.api.get_node())
            self._need_read = False
        with self._cond:
            node = self._node
            self._node_dirty = False
        assert node is not None
        result = plan(
            self.state.labels(now_utc()),
            node,
            overwrite=self.settings.overwrite,
            allow_removal=self._allow_removal(),
            may_own=self.settings.policy.may_own,
        )
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
            self._on_node(updated)
            with self._cond:
                self._node_dirty = False
        owned = owned_keys(self._node.annotations if self._node else {}, self.settings.policy.may_own)
        self.metrics.owned.set(len(owned))
        self.metrics.last_sync.set(time.time())
        self.synced = True
        self.syncs += 1

    def sync(self, attempts: int | None = None) -> None:
        self._retrying(self._sync_once, "patch", attempts)

    # ---- the Node watch (own thread) ----

    def _watch_once(self) -> None:
        if self._watch_rv is None:
            node, rv = self.api.list_node()
            if node is None:
                raise ApiError(404, f"node {self.settings.node_name!r} not found")
            self._on_node(node)
            self._watch_rv = rv
        try:
            for event in self.api.watch(self._watch_rv, self.settings.watch_timeout):
                obj = event.get("object") or {}
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if rv:
                    self._watch_rv = rv
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._on_node(obj)
                elif event.get("type") == "DELETED":
                    log.warning("node %s was deleted", self.settings.node_name)
        except ApiError as err:
            if err.status == 410:
                self._watch_rv = None  # too old to resume: list again
            raise

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._retrying(self._watch_once, "watch")
            except Stopped:
                return
            except ApiError:
                if self._stop.is_set():
                    return
            # A watch the server (or a proxy) ends at once, again and again, must not become a busy loop.
            if time.monotonic() - started < 1.0 and self._stop.wait(1.0):
                return

    # ---- lifecycle ----

    def healthy(self) -> bool:
        return not self._stop.is_set() and (self.watch_thread is None or self.watch_thread.is_alive())

    def run(self) -> None:
        """Run until ``stop()``. Labels are left as they are on exit."""
        s = self.settings
        watcher = DirWatcher(s.directories, self.notify_files, poll=s.poll)
        health = (
            HealthServer(s.metrics_address, self.metrics, self.healthy, lambda: self.synced)
            if s.metrics_address
            else None
        )
        if health:
            health.start()
        watcher.start()
        self._rescan()
        self.watch_thread = threading.Thread(target=self._watch_loop, name="nfd-lite-watch", daemon=True)
        self.watch_thread.start()
        next_resync = time.monotonic() + s.resync_interval
        next_check = time.monotonic() + 1.0
        try:
            while not self._stop.is_set():
                expiry = self.state.next_expiry(now_utc())
                with self._cond:
                    now = time.monotonic()
                    debounce = self._debounce.deadline()
                    deadlines = [next_resync, next_check]
                    if debounce is not None:
                        deadlines.append(debounce)
                    if expiry is not None:
                        deadlines.append(now + (expiry - now_utc()).total_seconds())
                    if not self._node_dirty and not (debounce is not None and debounce <= now):
                        self._cond.wait(max(0.0, min(deadlines) - now))
                    now = time.monotonic()
                    files_due = self._debounce.take(now)
                    node_due = self._node_dirty
                if self._stop.is_set():
                    break
                if now >= next_check:
                    next_check = now + 1.0
                    watcher.refresh()  # reattaches replaced or new directories (and notifies)
                expired = expiry is not None and expiry <= now_utc()
                if files_due or expired or now >= next_resync:
                    if now >= next_resync:
                        next_resync = now + s.resync_interval
                    self._rescan()
                    files_due = True
                if (files_due or node_due) and self._node is not None:
                    self.sync()
        except Stopped:
            pass
        finally:
            self._stop.set()
            self.api.abort_watch()
            watcher.stop()
            if health:
                health.stop()
            log.info("stopped; labels left in place")

    def oneshot(self, attempts: int = 5) -> None:
        """One scan, one read, at most one write (plus retries)."""
        self._rescan()
        self.sync(attempts)


def prune(api: NodeApi, policy: Policy, attempts: int = 5) -> list[str]:
    """Remove every owned label and the ownership annotation; returns the removed keys."""
    removed: list[str] = []

    def once() -> None:
        node = NodeState.from_object(api.get_node())
        body = prune_patch(node, policy.may_own)
        removed[:] = sorted(
            k for k, v in (body or {}).get("metadata", {}).get("labels", {}).items() if v is None
        )
        if body is not None:
            api.patch_node(body)

    Retrying(
        retry=retry_if_exception(lambda e: isinstance(e, ApiError) and e.status not in (401, 403, 404)),
        wait=wait_exponential(multiplier=0.1, max=5.0) + wait_random(0, 0.1),
        stop=stop_after_attempt(attempts),
        reraise=True,
    )(once)
    return removed


class _StopWhen(stop_base):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()
