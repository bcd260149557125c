"""A program the Kubernetes tests and benchmarks run beside the control plane: its own process, its
output in a log file, stopped as the kubelet stops a container (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Self


class LoggedProcess:
    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was not started"
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, and SIGKILL after ``grace`` seconds; the exit status (None if never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")
