"""Shared set-up for the nfd-lite benchmarks: the fake API server in this process, the writer as its own
process (``python -m nfd_lite``), exactly as it runs in the pod apart from the kubeconfig."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.apiserver.server import FakeApiServer  # noqa: E402

NODE = "bench-node"
USER = "system:serviceaccount:gpu-labeller:nfd-lite"


def _no_delay(server: FakeApiServer) -> None:
    """Answer with TCP_NODELAY, as Go's net/http (the real API server) does by default. Without it the
    fake server's separate header and body writes meet Nagle's algorithm and the client's delayed ACK,
    adding about 40 ms to every request, which would measure the test double, not the writer."""
    opened = server.connection_opened

    def with_no_delay(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        opened(conn)

    server.connection_opened = with_no_delay  # type: ignore[method-assign]


class Bench:
    def __init__(self, *writer_args: str, **server: Any) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="nfd-lite-bench-"))
        self.features = self.tmp / "features.d"
        self.features.mkdir()
        self.server = FakeApiServer(**server).start()
        _no_delay(self.server)
        self.server.add_node(NODE)
        token = self.server.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
        kubeconfig = self.server.write_kubeconfig(self.tmp / "kubeconfig", token)
        argv = ["--node-name", NODE, "--kubeconfig", str(kubeconfig), "--features-dir", str(self.features),
                "--metrics-address", "", "--log-level", "warning", *writer_args]  # fmt: skip
        self.proc = subprocess.Popen([sys.executable, "-m", "nfd_lite", *argv], env=dict(os.environ))

    def write(self, text: str, name: str = "gfd") -> None:
        temp = self.features / f".{name}.tmp"
        temp.write_text(text)
        os.replace(temp, self.features / name)

    def label(self, key: str) -> str | None:
        return self.server.labels(NODE).get(key)

    def wait_label(self, key: str, value: str, timeout: float = 10.0) -> bool:
        store = self.server.store
        with store.cond:
            return bool(store.cond.wait_for(lambda: self.label(key) == value, timeout))

    def writer_requests(self) -> list[Any]:
        return [r for r in self.server.requests if r.user == USER]

    def peak_rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.server.stop()


def settle(seconds: float) -> None:
    time.sleep(seconds)
