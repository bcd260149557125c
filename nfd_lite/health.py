"""/healthz, /readyz and /metrics on one small HTTP server thread, within ``hostport.serving``'s
connection cap and timeouts."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hostport import parse_address
from hostport.serving import BoundedThreadingMixIn, address_family
from nfd_lite.metrics import WriterMetrics

log = logging.getLogger(__name__)


class HealthServer:
    def __init__(
        self, address: str, metrics: WriterMetrics, healthy: Callable[[], bool], ready: Callable[[], bool]
    ) -> None:
        host, port = parse_address(address)
        checks = {"/healthz": healthy, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._answer(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
                elif path in checks:
                    ok = checks[path]()
                    self._answer(200 if ok else 503, b"ok\n" if ok else b"not ok\n", "text/plain")
                else:
                    self._answer(404, b"not found\n", "text/plain")

            def _answer(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("health: " + format, *args)

        family, bind = address_family(host, port)

        class Server(BoundedThreadingMixIn, HTTPServer):
            address_family = family

        self.server = Server((bind, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="nfd-lite-health", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
