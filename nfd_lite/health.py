"""/healthz, /readyz and /metrics on one small HTTP server thread, within ``hostport.serving``'s
connection cap and deadlines, which keep the probes answered while other connections take every slot."""

from __future__ import annotations

from collections.abc import Callable

from hostport import parse_address
from hostport.serving import Answer, RouteServer
from nfd_lite.metrics import WriterMetrics
from promtext import CONTENT_TYPE


def _check(passes: Callable[[], bool]) -> Callable[[], Answer]:
    def answer() -> Answer:
        ok = passes()
        return (200, b"ok\n", "text/plain") if ok else (503, b"not ok\n", "text/plain")

    return answer


class HealthServer(RouteServer):
    def __init__(
        self, address: str, metrics: WriterMetrics, healthy: Callable[[], bool], ready: Callable[[], bool]
    ) -> None:
        host, port = parse_address(address)
        routes = {
            "/metrics": lambda: (200, metrics.registry.exposition(), CONTENT_TYPE),
            "/healthz": _check(healthy),
            "/readyz": _check(ready),
        }
        super().__init__(host, port, routes, name="nfd-lite-health")
