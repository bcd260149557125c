"""The labelling loop: probe, build labels, write the feature file when needed.

- The file is rewritten only when the labels changed or its expiry needs
  pushing forward, so an idle node costs no writes and no node updates.
- A backend that failed (or was never found) is detected again on the next
  pass, so a driver installed after start-up is picked up without a restart.
- A failed pass writes nothing: the last good labels stay until they expire,
  never replaced by wrong ones.
- SIGTERM/SIGINT end the loop between passes (never mid-write) and leave the
  file in place, so labels survive a rollout; the expiry cleans up after a
  daemon that is gone for good. SIGHUP re-reads the settings and config file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import signal
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gfd.backends import Backend, detect, no_gpu_on_the_bus
from gfd.backends.errors import BackendError
from gfd.config import Settings
from gfd.inventory import Inventory
from gfd.metrics import Metrics
from gfd.writer import read_feature_file, write_feature_file

log = logging.getLogger("gfd")

LabelFn = Callable[[Inventory, Settings, datetime], dict[str, str]]
RETRY_WHEN_IDLE = timedelta(seconds=60)  # retry pace after a failure when the sleep interval is infinite


def build_labels_for(inv: Inventory, settings: Settings, now: datetime) -> dict[str, str]:
    from gfd.labels import LabelOptions, build_labels

    opts = LabelOptions(
        mig_strategy=settings.mig_strategy,
        sharing=settings.sharing,
        timestamp=now if settings.label_timestamp else None,
        with_vgpu=settings.with_vgpu,
    )
    return build_labels(inv, opts)


def read_machine_type(path: Path) -> str | None:
    """The DMI product name, or None where the file is missing (VMs, Jetsons, containers without /sys)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


class RepeatFilter(logging.Filter):
    """Lets a warning through once while it repeats pass after pass (a GPU that never reports its
    memory should not fill the log every minute); it is shown again after a pass without it."""

    def __init__(self) -> None:
        super().__init__()
        self._previous: set[str] = set()
        self._current: set[str] = set()

    def new_pass(self) -> None:
        self._previous, self._current = self._current, set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        self._current.add(message)
        return message not in self._previous


@dataclasses.dataclass
class PassResult:
    ok: bool
    labels: dict[str, str] | None = None
    written: bool = False
    error: str | None = None  # the one-line message when the pass failed
    layer: str | None = None  # the layer that failed: a BackendError layer, "output" or "internal"


class Daemon:
    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        label_fn: LabelFn = build_labels_for,
        detect_fn: Callable[..., tuple[Backend, Inventory | None]] = detect,
        reload_fn: Callable[[], Settings] | None = None,
    ) -> None:
        self.settings = settings
        self.reload_fn = reload_fn  # re-reads flags, environment and config file (on SIGHUP)
        self._reload_requested = False
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.label_fn = label_fn
        self.detect_fn = detect_fn
        self.backend: Backend | None = None
        self.succeeded = False
        self._wake_fds: tuple[int, int] | None = None  # self-pipe, open while run() runs
        self._stopping = False
        self._stop_signal: str | None = None
        self._last_error: str | None = None
        self.repeat_filter = RepeatFilter()
        # Start from what the file holds, so a restarted daemon does not rewrite an up-to-date file.
        self.written: Mapping[str, str] | None = None
        self.written_expiry: datetime | None = None
        self._read_existing()

    def _read_existing(self) -> None:
        self.written, self.written_expiry = None, None
        if self.settings.output_file is not None:
            existing = read_feature_file(self.settings.output_file)
            if existing is not None:
                self.written, self.written_expiry = existing

    # --- one pass ---

    def probe(self) -> Inventory:
        inv: Inventory | None = None
        backend = self.backend
        s = self.settings
        if backend is None:
            backend, inv = self.detect_fn(
                s.backend,
                host_root=s.host_root,
                mock_profile=s.mock_profile,
                with_vgpu=s.with_vgpu,
                driver_root=s.driver_root,
            )
        try:
            if inv is None:
                inv = backend.probe()
        except BackendError as err:
            self.backend = None  # detect again next pass: the stack may have changed under us
            if backend.name == "nvml":
                raise no_gpu_on_the_bus(s.host_root) or err from None
            raise
        self.backend = backend
        if not inv.devices and inv.backend == "nvml":
            log.warning("no NVIDIA GPU found: NVML loaded but reports no devices; writing no GPU labels")
        if inv.machine is None:
            machine = read_machine_type(self.settings.machine_type_file)
            if machine is not None:
                inv = dataclasses.replace(inv, machine=machine)
        return inv

    def run_pass(self) -> PassResult:
        now = self.clock()
        self.repeat_filter.new_pass()
        try:
            inv = self.probe()
            labels = self.label_fn(inv, self.settings, now)
        except BackendError as err:
            return self._failed(err.layer, str(err), now)
        except Exception as err:  # a bug must not kill the daemon nor write half-made labels
            log.debug("unexpected error in a pass", exc_info=True)
            return self._failed("internal", f"internal: {type(err).__name__}: {err}", now)
        for warning in inv.warnings:
            log.warning("%s", warning)
        try:
            written = self._write_if_needed(labels, now)
        except OSError as err:
            where = self.settings.output_file
            return self._failed("output", f"output: cannot write {where}: {err.strerror or err}", now)
        if self._last_error is not None:
            log.info("pass succeeded again (backend %s)", inv.backend)
            self._last_error = None
        self.succeeded = True
        self.metrics.pass_done(ok=True, layer=None, labels=len(labels), now=now.timestamp())
        return PassResult(ok=True, labels=labels, written=written)

    def _failed(self, layer: str, line: str, now: datetime) -> PassResult:
        if line != self._last_error:  # one line per distinct failure, not one per pass
            kept = "; the labels already written stay" if self.written else ""
            log.error("%s%s", line, kept)
            self._last_error = line
        self.metrics.pass_done(ok=False, layer=layer, labels=None, now=now.timestamp())
        return PassResult(ok=False, error=line, layer=layer)

    def _write_if_needed(self, labels: dict[str, str], now: datetime) -> bool:
        expiry_span = self.settings.expiry
        new_expiry = (now + expiry_span).replace(microsecond=0) if expiry_span is not None else None
        if not self._needs_write(labels, now):
            return False
        changed = write_feature_file(self.settings.output_file, labels, new_expiry)
        self.written, self.written_expiry = dict(labels), new_expiry
        if changed:
            self.metrics.file_written()
            log.debug("wrote %d labels to %s", len(labels), self.settings.output_file or "stdout")
        return changed

    def _needs_write(self, labels: Mapping[str, str], now: datetime) -> bool:
        if self.written is None or dict(labels) != dict(self.written):
            return True
        span = self.settings.expiry
        if span is None:
            return self.written_expiry is not None  # drop a stale directive
        if self.written_expiry is None:
            return True
        # Push the expiry forward once half of it is used up, and always before the next pass could
        # find it lapsed; with the default (3 intervals) that is one write every other pass.
        interval = self.settings.sleep_interval
        threshold = span / 2 if interval is None else max(span / 2, interval * 1.5)
        return self.written_expiry - now < threshold

    # --- the loop ---

    def stop(self) -> None:
        """Ask the loop to end after the current pass (safe from signal handlers and other threads)."""
        self._stopping = True
        self._poke()

    def wake(self) -> None:
        """Run the next pass now."""
        self._poke()

    def request_reload(self) -> None:
        """Re-read the settings (above all the config file), then run a pass now."""
        self._reload_requested = True
        self._poke()

    # A signal handler must not take locks (threading.Event does: a signal landing while the loop
    # holds that lock would deadlock), so the loop sleeps in select() on a pipe the handlers write to.
    def _poke(self) -> None:
        fds = self._wake_fds
        if fds is not None:
            with contextlib.suppress(OSError):  # full (already poked) or closed (loop ended)
                os.write(fds[1], b"\0")

    def _sleep(self, seconds: float | None) -> None:
        fds = self._wake_fds
        assert fds is not None
        if self._stopping or self._reload_requested:
            return  # asked before the pipe could carry it
        ready, _, _ = select.select([fds[0]], [], [], seconds)
        if ready:
            with contextlib.suppress(OSError):
                os.read(fds[0], 4096)

    def _reload(self) -> None:
        from gfd.config import ConfigError

        self._reload_requested = False
        if self.reload_fn is None:
            return
        try:
            new = self.reload_fn()
        except ConfigError as err:
            log.error("reload: %s; keeping the settings in use", err)
            return
        if new == self.settings:
            return
        log.info("settings reloaded")
        old_output, self.settings = self.settings.output_file, new
        self.backend = None  # backend options may have changed
        if new.output_file != old_output:
            self._read_existing()

    def run(self) -> int:
        """Loop until stopped; return the exit status (1 when the first pass fails and must be fatal)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._wake_fds = (read_fd, write_fd)
        try:
            return self._loop()
        finally:
            self._wake_fds = None
            os.close(read_fd)
            os.close(write_fd)

    def _loop(self) -> int:
        while not self._stopping:
            if self._reload_requested:
                self._reload()
            result = self.run_pass()
            s = self.settings
            if not result.ok and not self.succeeded and s.fail_on_init_error:
                return 1
            if s.oneshot:
                # One pass, whatever it gave: with --fail-on-init-error=false a failure is not fatal
                # (as NVIDIA's), but a one-off run never turns into a loop.
                return 0
            wait = s.sleep_interval
            if wait is None and not result.ok:
                wait = RETRY_WHEN_IDLE
            self._sleep(wait.total_seconds() if wait is not None else None)
        why = f"{self._stop_signal} received" if self._stop_signal else "asked to stop"
        out = self.settings.output_file
        # Name the file only when there is one holding labels: a daemon that never labelled leaves none.
        kept = f"; {out} stays in place until its labels expire" if out and self.written is not None else ""
        log.info("%s: stopping%s", why, kept)
        return 0

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop after the current pass. SIGHUP: reload settings and run a pass now (as
        NVIDIA's config-manager sidecar expects after it switched the config file)."""

        def on_stop(signum: int, _frame: Any) -> None:
            self._stop_signal = signal.Signals(signum).name  # logged by the loop: no I/O in a handler
            self.stop()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, lambda _s, _f: self.request_reload())
