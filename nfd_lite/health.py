"""/healthz, /readyz and /metrics on one small HTTP server thread, within ``hostport.serving``'s
connection cap and deadlines, which keep the probes answered while other connections take every slot."""

from __future__ import annotations

from collections.abc import Callable

from hostport import parse_address
from hostport.serving import Answer, RouteServer
from nfd_lite.metrics import WriterMetrics
from promtext import CONTENT_TYPE


def _check(
    passes: Callable[[], bool], why_not: Callable[[], str | None] | None = None
) -> Callable[[], Answer]:
    def answer() -> Answer:
        if passes():
            return (200, b"ok\n", "text/plain")
        reason = why_not() if why_not is not None else None
        # One line: what a human reading `kubectl describe pod` (the probe's body) needs to act on.
        line = f"not ok: {' '.join(reason.split())}" if reason else "not ok"
        return (503, line.encode("utf-8", "replace") + b"\n", "text/plain; charset=utf-8")

    return answer


class HealthServer(RouteServer):
    """``unready_reason`` (optional) says in one line why ``ready`` is false; /readyz answers it."""

    def __init__(
        self,
        address: str,
        metrics: WriterMetrics,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        unready_reason: Callable[[], str | None] | None = None,
    ) -> None:
        host, port = parse_address(address)
        routes = {
            "/metrics": lambda: (200, metrics.registry.exposition(), CONTENT_TYPE),
            "/healthz": _check(healthy),
            "/readyz": _check(ready, unready_reason),
        }
        super().__init__(host, port, routes, name="nfd-lite-health")
