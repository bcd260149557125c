"""The labelling loop: probe, build labels, write the feature file when needed.

- The file is rewritten only when the labels changed or its expiry needs
  pushing forward, so an idle node costs no writes and no node updates.
- A backend that failed (or was never found) is detected again on the next
  pass, so a driver installed after start-up is picked up without a restart.
- A failed pass writes nothing: the last good labels stay until they expire,
  never replaced by wrong ones. One GPU that fails is no failed pass: the
  labels come from the GPUs that answer and say the node is degraded, and
  the metrics count the GPU; NVML's fatal Xid events wake the loop between
  passes (``Watching`` backends).
- Ready (/readyz, ``gfd.readiness``) while the last pass labelled at least one GPU that answers: no
  GPU found, for whatever reason, or a failed pass makes the pod unready with a one-line reason and sets
  ``gfd_no_gpu``, and the line that says it in the log also says so (and points at ``gfd doctor``).
- A node that stays broken does not fill the log: each warning (the
  backend's and the labelers') and each failure is said once while it
  repeats, again after it went away and came back, and the recovery once.
- SIGTERM/SIGINT end the loop between passes (never mid-write) and leave the
  file in place, so labels survive a rollout; the expiry cleans up after a
  daemon that is gone for good. SIGHUP re-reads the settings and config file.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gfd.backends import Backend, Watching, detect, probe
from gfd.backends.errors import BackendError
from gfd.backends.host import with_machine_type
from gfd.expiry import ExpiryPolicy
from gfd.inventory import GpuFailure, Inventory
from gfd.labels import LabelOptions, LabelSet, build_labels
from gfd.loopcontrol import LoopControl
from gfd.metrics import Metrics
from gfd.readiness import STARTING, Readiness, of_inventory
from gfd.settings import ConfigError, Settings
from gfd.writer import FeatureFile
from saidonce import SaidOnce

log = logging.getLogger("gfd")

RETRY_WHEN_IDLE = timedelta(seconds=60)  # retry pace after a failure when the sleep interval is infinite


def reread_settings(current: Settings, reload_fn: Callable[[], Settings] | None) -> Settings | None:
    """The settings after a reload request, or None to keep ``current`` (unchanged, or unreadable:
    logged, so a broken config file never stops a daemon that works)."""
    if reload_fn is None:
        return None
    try:
        new = reload_fn()
    except ConfigError as err:
        log.error("reload: %s; keeping the settings in use", err)
        return None
    if new == current:
        return None
    log.info("settings reloaded")
    return new


@dataclasses.dataclass
class PassResult:
    ok: bool
    labels: dict[str, str] | None = None
    written: bool = False
    error: str | None = None  # the one-line message when the pass failed
    layer: str | None = None  # the layer that failed: a BackendError layer, "output" or "internal"


class Daemon:
    """Runs passes (probe, labels, write) in a loop, composing the parts that each do one job."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        detect_fn: Callable[..., tuple[Backend, Inventory | None]] = detect,
        reload_fn: Callable[[], Settings] | None = None,
    ) -> None:
        self.settings = settings
        self.reload_fn = reload_fn  # re-reads flags, environment and config file (on SIGHUP)
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.detect_fn = detect_fn
        self.backend: Backend | None = None
        self.succeeded = False
        self.control = LoopControl()
        self.warnings: SaidOnce[str] = SaidOnce()  # the backend's and the labelers', pass after pass
        self.failures: SaidOnce[str] = SaidOnce()  # the failed pass's one line; none while passes succeed
        self.gpu_failures: SaidOnce[GpuFailure] = SaidOnce()  # counted in the metrics once each
        # Starts from what the file holds, so a restarted daemon does not rewrite an up-to-date file.
        self.output = FeatureFile(settings.output_file)
        self._labelled: tuple[Inventory, LabelOptions, LabelSet] | None = None  # the last pass's
        self.readiness: Readiness = STARTING

    def labels_for(self, inv: Inventory, opts: LabelOptions) -> LabelSet:
        """The labels of ``inv``: the last pass's again when it saw the same and was asked the same, as a
        node's GPUs are pass after pass (comparing costs a fraction of labelling anew)."""
        last = self._labelled
        if last is not None and last[0] == inv and last[1] == opts:
            return last[2]
        labelled = build_labels(inv, opts)
        self._labelled = (inv, opts, labelled)
        return labelled

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
            if isinstance(backend, Watching) and not s.oneshot:
                backend.watch(self.wake)
        try:
            if inv is None:
                inv = probe(backend, s.host_root)
        except BackendError:
            self._drop_backend(backend)  # detect again next pass: the stack may have changed under us
            raise
        self.backend = backend
        return with_machine_type(inv, self.settings.machine_type_file)

    def _drop_backend(self, backend: Backend | None) -> None:
        if isinstance(backend, Watching):
            backend.close()
        self.backend = None

    def _count_gpus(self, inv: Inventory) -> None:
        failing = inv.health.failures if inv.health is not None else ()
        for failure in self.gpu_failures.update(failing).new:
            self.metrics.gpu_failed(layer=failure.layer, error=failure.error)
        self.metrics.gpus(answering=len(inv.devices), failing=failing)

    def run_pass(self) -> PassResult:
        now = self.clock()
        try:
            inv = self.probe()
            labelled = self.labels_for(inv, LabelOptions.from_settings(self.settings, now))
        except BackendError as err:  # the stack could not be probed: no GPU to label
            return self._failed_unlabelled(err.layer, str(err), now, no_gpu=True)
        except Exception as err:  # a bug must not kill the daemon nor write half-made labels
            log.debug("unexpected error in a pass", exc_info=True)
            line = f"internal: {type(err).__name__}: {err}"
            return self._failed_unlabelled("internal", line, now, no_gpu=None)
        state = of_inventory(inv)
        warnings = (*inv.warnings, *labelled.warnings)
        if state.reason is not None:
            # A warning like the backend's own, so that it is said once while it lasts, not every pass.
            # GPUs that all fail are still labelled, as failing (gpu.health).
            unlabelled = "" if inv.health is not None and inv.health.failures else "; writing no GPU labels"
            note = self._unready_note(state.reason, ending=False)
            warnings = (*warnings, f"{state.reason}{unlabelled}{note}")
        self._warn(warnings)
        self._count_gpus(inv)
        labels = labelled.labels
        try:
            written = self._write_if_needed(labels, now)
        except OSError as err:
            line = f"output: cannot write {self.settings.output_file}: {err.strerror or err}"
            return self._failed("output", line, now, no_gpu=state.no_gpu)
        was = self.readiness
        self._set_readiness(state)
        if self.failures.update(()).recovered:
            log.info("pass succeeded again (backend %s)", inv.backend)
        elif was.no_gpu and state.ready:
            log.info("%d GPU(s) found again%s", len(inv.devices), "; ready" if self.metrics.serving else "")
        self.succeeded = True
        self.metrics.pass_done(ok=True, layer=None, labels=len(labels), now=now.timestamp())
        return PassResult(ok=True, labels=labels, written=written)

    def _warn(self, warnings: tuple[str, ...]) -> None:
        for warning in self.warnings.update(warnings).new:
            log.warning("%s", warning)

    def _failed_unlabelled(self, layer: str, line: str, now: datetime, *, no_gpu: bool | None) -> PassResult:
        # A pass that got no labels has no warnings: whatever comes back after it is said again.
        self._warn(())
        return self._failed(layer, line, now, no_gpu=no_gpu)

    def _failed(self, layer: str, line: str, now: datetime, *, no_gpu: bool | None) -> PassResult:
        self._set_readiness(Readiness(line, no_gpu))
        if self.failures.update((line,)).new:
            kept = "; the labels already written stay" if self.output.labels else ""
            note = self._unready_note(line, ending=not self.succeeded and self.settings.fail_on_init_error)
            log.error("%s%s%s", line, kept, note if no_gpu else "")
        self.metrics.pass_done(ok=False, layer=layer, labels=None, now=now.timestamp())
        return PassResult(ok=False, error=line, layer=layer)

    def _set_readiness(self, state: Readiness) -> None:
        self.readiness = state
        self.metrics.readiness(state)

    def _unready_note(self, line: str, *, ending: bool) -> str:
        """What a line saying that no GPU was found adds in a daemon that goes on (``ending``: this pass
        ends it): that the pod is not ready, and where to look next."""
        if ending or self.settings.oneshot:
            return ""
        ready = "; not ready: /readyz answers 503 and gfd_no_gpu is 1" if self.metrics.serving else ""
        # NVML's fallback line (nvml_errors) points there already.
        doctor = "" if "gfd doctor" in line else "; `gfd doctor` on this node checks every layer"
        return f"{ready} until a pass finds a GPU{doctor}" if ready else doctor

    def _write_if_needed(self, labels: dict[str, str], now: datetime) -> bool:
        """Write when the labels changed or the expiry is due to be pushed forward."""
        expiry = ExpiryPolicy(self.settings.expiry, self.settings.sleep_interval)
        if labels == self.output.labels and not expiry.due(self.output.expiry, now):
            self.metrics.labels_expire(self.output.expiry)  # as found in the file at start, or last written
            return False
        changed = self.output.write(labels, expiry.expiry_at(now))
        self.metrics.labels_expire(self.output.expiry)
        if changed:
            self.metrics.file_written()
            log.debug("wrote %d labels to %s", len(labels), self.settings.output_file or "stdout")
        return changed

    # --- the loop ---

    def stop(self) -> None:
        """Ask the loop to end after the current pass (safe from signal handlers and other threads)."""
        self.control.stop()

    def wake(self) -> None:
        """Run the next pass now."""
        self.control.wake()

    def request_reload(self) -> None:
        """Re-read the settings (above all the config file), then run a pass now."""
        self.control.request_reload()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop after the current pass; SIGHUP reloads and runs a pass now."""
        self.control.install_signal_handlers()

    def _reload(self) -> None:
        new = reread_settings(self.settings, self.reload_fn)
        if new is None:
            return
        old_output, self.settings = self.settings.output_file, new
        self._drop_backend(self.backend)  # backend options may have changed
        if new.output_file != old_output:
            self.output = FeatureFile(new.output_file)

    def run(self) -> int:
        """Loop until stopped; return the exit status (1 when the first pass fails and must be fatal)."""
        with self.control.running():
            try:
                return self._loop()
            finally:
                self._drop_backend(self.backend)

    def _loop(self) -> int:
        while not self.control.stopping:
            if self.control.take_reload():
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
            self.control.sleep(wait.total_seconds() if wait is not None else None)
        out = self.settings.output_file
        # Name the file only when there is one holding labels: a daemon that never labelled leaves none.
        holds_labels = out and self.output.labels is not None
        kept = f"; {out} stays in place until its labels expire" if holds_labels else ""
        log.info("%s: stopping%s", self.control.stop_reason, kept)
        return 0
