"""Shared set-up for the nfd-lite benchmarks on the fake API server (tests/apiserver): the server in this
process, the writer as its own process (the installed ``nfd-lite``, benchmarks/support/install.py), as it runs
in the pod apart from the kubeconfig (the fake server is reached through one)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.support.chart import nfd_lite_args, nfd_lite_env
from benchmarks.support.install import Installed
from benchmarks.support.measure import peak_rss_mib
from tests.apiserver.server import FakeApiServer

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
    def __init__(self, installed: Installed, *writer_args: str, **server: Any) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="nfd-lite-bench-"))
        self.features = self.tmp / "source.d"  # where gfd writes
        self.features.mkdir()
        (self.tmp / "features.d").mkdir()
        self.server = FakeApiServer(**server).start()
        _no_delay(self.server)
        self.server.add_node(NODE)
        token = self.server.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
        kubeconfig = self.server.write_kubeconfig(self.tmp / "kubeconfig", token)
        chart = nfd_lite_args([self.features, self.tmp / "features.d"])
        argv = [str(installed.nfd_lite), "--kubeconfig", str(kubeconfig), *chart, *writer_args]
        with open(self.tmp / "nfd-lite.log", "wb") as log:  # its log, kept out of the figures' output
            self.proc = subprocess.Popen(
                argv, env=installed.env() | nfd_lite_env(NODE), stdout=log, stderr=subprocess.STDOUT
            )

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

    def peak_rss_mib(self) -> float:
        return peak_rss_mib(self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
