"""The writer's Service in a thread of the test process, for tests that look inside it (metrics, sync
passes) while it talks to an API server: the real one (tests/kube) or the fault-injecting one."""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from nfd_lite.api.connection import Connection
from nfd_lite.service import Service
from nfd_lite.settings import WriterSettings
from tests.waiting import eventually, write_atomic

# Quick retries so fault tests end in seconds; the start-up grace would only delay removals.
TEST_SETTINGS: dict[str, Any] = {
    "max_backoff": 0.5,
    "slow_retry": 0.5,
    "startup_grace": 0.0,
    "request_timeout": 5.0,
}


class ServiceThread:
    """``with ServiceThread(connection, node, directory) as w:`` runs the writer, as the command builds it,
    until the block ends."""

    def __init__(self, connection: Connection, node: str, directory: Path, **settings: Any) -> None:
        self.dir = directory
        self.service = Service(WriterSettings(node, [directory], **(TEST_SETTINGS | settings)), connection)
        self.api = self.service.api
        self.thread = threading.Thread(target=self.service.run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.service.stop()
        self.thread.join(10)
        assert not self.thread.is_alive(), "writer did not stop"

    def write(self, text: str, name: str = "gfd") -> None:
        write_atomic(self.dir, name, text)

    def settle(self) -> None:
        """Wait until the writer has completed one more sync pass than now (after an event)."""
        before = self.syncs()
        assert eventually(lambda: self.syncs() > before)

    def syncs(self) -> float:
        """Sync passes completed, as the writer's metrics count them."""
        return self.metric("nfd_lite_syncs_total")

    def metric(self, name: str, **labels: str) -> float:
        value = self.service.metrics.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value
