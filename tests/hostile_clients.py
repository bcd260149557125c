"""Connections that try to keep a probe server's slots from the kubelet, as the red team's did: ``drip``
sends a request one byte every ``--drip`` seconds and never finishes it; ``reconnect`` sends nothing. Both
reconnect as soon as the server closes them, so the server never has a slot that no attacker is racing
for. One thread, non-blocking sockets, standard library only: the real-node test runs this file inside the
node's network namespace with whatever Python is there.

``python tests/hostile_clients.py HOST PORT --mode drip --connections 40 --seconds 120`` runs until the
seconds are up or SIGTERM. It prints a JSON line once its first connections are on their way, and one at
the end: connections opened, and closed by the server."""

from __future__ import annotations

import argparse
import errno
import json
import select
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

# What the drip sends: a request line, then a header that never ends (one byte per drip stays far below
# any line limit within a test's minutes).
DRIP = b"GET /healthz HTTP/1.1\r\nX-Drip: "


class Attack:
    def __init__(self, host: str, port: int, connections: int, mode: str, drip: float) -> None:
        self.address = (host, port)
        self.family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.connections, self.mode, self.drip = connections, mode, drip
        self.selector = selectors.DefaultSelector()
        self.sent: dict[socket.socket, int] = {}  # bytes each open connection has dripped
        self.opened = self.closed_by_server = 0
        self.stopping = False

    def _open(self) -> None:
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.setblocking(False)
        err = sock.connect_ex(self.address)
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            time.sleep(0.01)  # refused (the server is not listening yet, or restarting): try again soon
            return
        self.selector.register(sock, selectors.EVENT_READ)
        self.sent[sock] = 0
        self.opened += 1

    def _close(self, sock: socket.socket) -> None:
        self.selector.unregister(sock)
        del self.sent[sock]
        sock.close()

    def _drip_all(self) -> None:
        for sock in list(self.sent):
            done = self.sent[sock]
            byte = DRIP[done : done + 1] or b"a"
            try:
                self.sent[sock] += sock.send(byte)
            except (BlockingIOError, InterruptedError):
                pass  # still connecting: it drips at the next round
            except OSError:
                self.closed_by_server += 1
                self._close(sock)

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        next_drip = time.monotonic() + self.drip
        announced = False
        while not self.stopping and (now := time.monotonic()) < end:
            while len(self.sent) < self.connections:
                self._open()
            if not announced:  # the caller waits for this line before it measures anything
                print(json.dumps({"connecting": len(self.sent)}), flush=True)
                announced = True
            if self.mode == "drip" and now >= next_drip:
                self._drip_all()
                next_drip = now + self.drip
            for key, _ in self.selector.select(timeout=min(0.2, max(0.0, next_drip - now))):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""  # reset or refused
                if not data:  # closed by the server (an answer, if any, is read and dropped first)
                    self.closed_by_server += 1
                    self._close(sock)
        for sock in list(self.sent):
            self._close(sock)


class HostileClients:
    """This file run as a process against ``host``:``port`` for the ``with`` block (``prefix`` runs it
    elsewhere, e.g. inside the node's namespaces); ``stats`` says afterwards what it did."""

    def __init__(
        self,
        host: str,
        port: int,
        mode: str,
        *,
        connections: int = 40,
        seconds: float = 900,
        drip: float = 2.0,
        prefix: Sequence[str] = (),
    ) -> None:
        self.command = [
            *prefix,
            sys.executable,
            str(Path(__file__).resolve()),
            host,
            str(port),
            f"--mode={mode}",
            f"--connections={connections}",
            f"--seconds={seconds}",
            f"--drip={drip}",
        ]
        self.stats: dict[str, int] = {}

    def __enter__(self) -> HostileClients:
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        if not ready or not self.process.stdout.readline():
            self._end()
            raise RuntimeError(f"the hostile clients did not start: {self.command}")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end()

    def _end(self) -> None:
        self.process.terminate()
        try:
            out, _ = self.process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        last = out.strip().splitlines()[-1:] if out else []
        parsed: Any = json.loads(last[0]) if last else {}
        self.stats = {k: int(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--mode", choices=("drip", "reconnect"), required=True)
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--drip", type=float, default=2.0, help="seconds between a connection's bytes")
    args = parser.parse_args()
    attack = Attack(args.host, args.port, args.connections, args.mode, args.drip)

    def stop(*_: object) -> None:
        attack.stopping = True

    signal.signal(signal.SIGTERM, stop)
    attack.run(args.seconds)
    print(json.dumps({"opened": attack.opened, "closed_by_server": attack.closed_by_server}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
