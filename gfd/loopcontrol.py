"""What the daemon loop is asked to do between passes (stop, reload, run now) and the signals that ask.

A signal handler must not take locks (threading.Event does: a signal landing while the loop holds that
lock would deadlock), so the loop sleeps in select() on a pipe that the requests write to.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Iterator
from typing import Any


class LoopControl:
    """Requests to the loop; every request is safe from signal handlers and other threads."""

    def __init__(self) -> None:
        self.stopping = False
        self.stop_signal: str | None = None  # the signal that asked, named by the loop when it ends
        self.reload_requested = False
        self._wake_fds: tuple[int, int] | None = None  # self-pipe, open while the loop runs

    def stop(self) -> None:
        """End the loop after the current pass."""
        self.stopping = True
        self._poke()

    def wake(self) -> None:
        """Run the next pass now."""
        self._poke()

    def request_reload(self) -> None:
        """Re-read the settings, then run a pass now."""
        self.reload_requested = True
        self._poke()

    def take_reload(self) -> bool:
        """Whether a reload was asked for since the last call."""
        asked, self.reload_requested = self.reload_requested, False
        return asked

    @property
    def stop_reason(self) -> str:
        return f"{self.stop_signal} received" if self.stop_signal else "asked to stop"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The loop's lifetime: requests wake ``sleep`` only inside it."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._wake_fds = (read_fd, write_fd)
        try:
            yield
        finally:
            self._wake_fds = None
            os.close(read_fd)
            os.close(write_fd)

    def sleep(self, seconds: float | None) -> None:
        """Wait ``seconds`` (None: for ever) or until a request comes."""
        fds = self._wake_fds
        assert fds is not None, "sleep outside running()"
        if self.stopping or self.reload_requested:
            return  # asked before the pipe could carry it
        ready, _, _ = select.select([fds[0]], [], [], seconds)
        if ready:
            with contextlib.suppress(OSError):
                os.read(fds[0], 4096)

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop after the current pass. SIGHUP: reload and run a pass now (as NVIDIA's
        config-manager sidecar expects after it switched the config file)."""

        def on_stop(signum: int, _frame: Any) -> None:
            self.stop_signal = signal.Signals(signum).name  # logged by the loop: no I/O in a handler
            self.stop()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, lambda _s, _f: self.request_reload())

    def _poke(self) -> None:
        fds = self._wake_fds
        if fds is not None:
            with contextlib.suppress(OSError):  # full (already poked) or closed (loop ended)
                os.write(fds[1], b"\0")
