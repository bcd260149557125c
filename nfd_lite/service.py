"""The writer: feature files and the own-Node watch in, minimal merge patches out.

``Service`` is the one place the writer's parts are put together (the command, ``--oneshot`` and the
tests all build it): from the connection it makes the own-Node client, telling the ``Outage`` of each
answer; the directory watcher and the Node watch (``nodewatch``) feed the ``Inbox``; the main loop
(``loop``) rescans (``scanreport``) and runs sync passes (``sync``), which take the newest watched Node
from the ``Inbox`` and make each request under the one retry policy (``retry``).
"""

from __future__ import annotations

import logging
import threading
import time

from nfd_lite.api.client import NodeApi
from nfd_lite.api.connection import Connection
from nfd_lite.api.outage import Outage
from nfd_lite.api.retry import RetryPolicy, Stopped
from nfd_lite.files.features import FeatureState
from nfd_lite.files.scanreport import ScanReporter
from nfd_lite.files.watcher import DirWatcher
from nfd_lite.health import HealthServer
from nfd_lite.metrics import WriterMetrics
from nfd_lite.node.inbox import Inbox
from nfd_lite.node.loop import MainLoop
from nfd_lite.node.nodewatch import NodeWatch
from nfd_lite.node.selfcheck import PolicyNotEnforced
from nfd_lite.node.sync import NodeSync
from nfd_lite.settings import WriterSettings

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The writer cannot start here (a port, inotify): a configuration problem, said in one line."""


class Service:
    def __init__(
        self, settings: WriterSettings, connection: Connection, metrics: WriterMetrics | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics or WriterMetrics()
        self._stop = threading.Event()
        self.features = FeatureState(settings.directories, settings.policy, settings.limits)
        self.inbox = Inbox(settings.debounce, settings.debounce_cap)
        self.outage = outage = Outage(settings.policy_recheck_after, settings.api_unreachable_after)
        self.metrics.api_unreachable.set_function(lambda: float(outage.unreachable()))
        self.metrics.api_unreachable_seconds.set_function(outage.unreachable_for)
        self.api = NodeApi(
            connection, settings.node_name, request_timeout=settings.request_timeout, heard=outage.heard
        )
        retry = RetryPolicy(
            max_backoff=settings.max_backoff,
            slow_retry=settings.slow_retry,
            final=(PolicyNotEnforced,),  # refusing to write is the answer, not a failure
            stop=self._stop,
            metrics=self.metrics,
            outage=outage,
        )
        self.scan = ScanReporter(self.features, self.metrics)
        self.node_sync = NodeSync(
            settings=settings,
            api=self.api,
            features=self.features,
            inbox=self.inbox,
            retry=retry,
            outage=outage,
            metrics=self.metrics,
        )
        self.watch = NodeWatch(
            self.api,
            settings.node_name,
            settings.watch_timeout,
            retry,
            self.inbox,
            silence=settings.watch_silence,
            seen=lambda: self.metrics.node_seen.set(time.time()),
        )
        self.loop = MainLoop(
            inbox=self.inbox,
            features=self.features,
            scan=self.scan,
            sync=self.node_sync,
            resync_interval=settings.resync_interval,
            stop=self._stop,
        )

    @property
    def synced(self) -> bool:
        """Whether one sync pass has completed."""
        return self.node_sync.synced

    def ready(self) -> bool:
        """/readyz: one sync pass has completed, the API server has not gone unreachable since, and the
        last check found the admission policy enforced (where it is required)."""
        return self.unready_reason() is None

    def unready_reason(self) -> str | None:
        """Why /readyz fails, in one line; None while ready."""
        if not self.synced:
            return "no sync pass has completed yet"
        if self.outage.unreachable():
            return f"the API server has not answered for {self.outage.unreachable_for():.0f} s"
        return self.node_sync.admission.missing

    def stop(self) -> None:
        self._stop.set()
        self.inbox.wake()
        self.api.abort_watch()

    def healthy(self) -> bool:
        return not self._stop.is_set() and self.watch.alive()

    def run(self) -> None:
        """Run until ``stop()``. Labels are left as they are on exit."""
        s = self.settings
        watcher = DirWatcher(s.directories, self.inbox.files_changed, poll=s.poll)
        try:
            health = (
                HealthServer(s.metrics_address, self.metrics, self.healthy, self.ready, self.unready_reason)
                if s.metrics_address
                else None
            )
        except OSError as err:  # the port is taken or the address is not this host's
            raise StartupError(f"--metrics-address {s.metrics_address}: {err.strerror or err}") from err
        if health:
            health.start()
        try:
            watcher.start()
        except OSError as err:  # e.g. the inotify instance limit of this user is reached
            if health:
                health.stop()
            raise StartupError(
                f"cannot watch the feature directories: {err.strerror or err} "
                "(raise fs.inotify.max_user_instances, or run with --poll)"
            ) from err
        self.scan.rescan()
        self.watch.start()
        try:
            self.loop.run(watcher)
        except Stopped:
            pass
        finally:
            self._stop.set()
            self.api.abort_watch()
            watcher.stop()
            if health:
                health.stop()
            log.info("stopped; labels left in place")

    def oneshot(self, attempts: int = 5) -> frozenset[str]:
        """One scan, one read, at most one write (plus retries); returns the labels the admission policy
        refused (held back; the rest was written)."""
        self.scan.rescan()
        self.node_sync.once(attempts)
        return self.node_sync.held.keys()
