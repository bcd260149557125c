"""The main loop's schedule: a sync pass after a burst of file events (debounced) or a Node change, a
safety rescan every resync interval, a rescan when a label's +expiry-time passes, a pass when labels the
admission policy refused are due to be tried again or the policy itself is due to be checked again, and a
check of the directories' identity every second (inotify misses a directory replaced under it)."""

from __future__ import annotations

import threading
import time

from nfd_lite.files.features import FeatureState, now_utc
from nfd_lite.files.scanreport import ScanReporter
from nfd_lite.files.watcher import DirWatcher
from nfd_lite.node.inbox import Inbox
from nfd_lite.node.sync import NodeSync

DIRECTORY_CHECK = 1.0  # seconds between checks that each directory is still the one watched


class MainLoop:
    def __init__(
        self,
        *,
        inbox: Inbox,
        features: FeatureState,
        scan: ScanReporter,
        sync: NodeSync,
        resync_interval: float,
        stop: threading.Event,
    ) -> None:
        self.inbox = inbox
        self.features = features
        self.scan = scan
        self.sync = sync
        self.resync_interval = resync_interval
        self.stop = stop

    def run(self, watcher: DirWatcher) -> None:
        """Until ``stop`` is set; a stop while a pass waits to retry raises Stopped."""
        next_resync = time.monotonic() + self.resync_interval
        next_check = time.monotonic() + DIRECTORY_CHECK
        while not self.stop.is_set():
            expiry = self.features.next_expiry()
            retry_at = self.sync.next_retry()  # labels the admission policy refused, tried again
            policy_at = self.sync.next_policy_check()  # is the admission policy still enforced?
            due = [t for t in (retry_at, policy_at) if t is not None]
            until = min(next_resync, next_check, *due)
            if expiry is not None:
                until = min(until, time.monotonic() + (expiry - now_utc()).total_seconds())
            files_due, node_due = self.inbox.wait(until)
            now = time.monotonic()
            node_due = node_due or any(now >= t for t in due)
            if self.stop.is_set():
                break
            if now >= next_check:
                next_check = now + DIRECTORY_CHECK
                watcher.refresh()  # reattaches replaced or new directories (and notifies)
            expired = expiry is not None and expiry <= now_utc()
            if files_due or expired or now >= next_resync:
                if now >= next_resync:
                    next_resync = now + self.resync_interval
                self.scan.rescan()
                files_due = True
            # Passes start once the watch has listed the Node: the first plans against that list, not a read.
            if (files_due or node_due) and self.inbox.node is not None:
                self.sync.once()
