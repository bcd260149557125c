"""The ``gfd`` command: settings in, daemon (or one pass) out, one-line errors.

Exit status: 0 done, 1 the GPU stack could not be probed (and that is fatal
here), 2 bad flags, environment, config file or profile.
"""

from __future__ import annotations

# Little beyond what the interpreter has loaded already: until main() takes over SIGINT, a Ctrl-C would
# end an import with a traceback, so this module imports nothing heavier at the top.
import contextlib
import signal
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gfd.settings import Settings


def _interrupted(signum: int, _frame: object) -> None:
    # Ctrl-C before the daemon takes over SIGINT (or in gfd doctor): end quietly, as a shell expects.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    with contextlib.suppress(ValueError):  # not the main thread (embedded): the caller owns its signals
        signal.signal(signal.SIGINT, _interrupted)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


def _setup_logging(level: int) -> None:
    import logging

    class OneLine(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"gfd: {record.levelname.lower()}: {record.getMessage()}"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine())
    root = logging.getLogger("gfd")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _main(args: list[str]) -> int:
    if args and args[0] == "doctor":
        from gfd.doctor.cli import main as doctor_main  # only a doctor run pays for its imports

        return doctor_main(args[1:])
    if args and args[0] == "fleet":
        from gfd.fleet.cli import main as fleet_main

        return fleet_main(args[1:])

    import logging
    import os

    from gfd.config import load_settings
    from gfd.settings import ConfigError

    _setup_logging(logging.WARNING)
    log = logging.getLogger("gfd")
    try:
        settings = load_settings(args, os.environ)
    except ConfigError as err:
        print(f"gfd: error: {err}", file=sys.stderr)
        return 2
    if not settings.oneshot:
        _setup_logging(logging.DEBUG if os.environ.get("GFD_DEBUG") else logging.INFO)
    if settings.use_node_feature_api:
        log.warning(
            "--use-node-feature-api: gfd has no Kubernetes identity to publish NodeFeature objects with; "
            "labels go through the feature file %s and nfd-lite",
            settings.output_file or "(standard output)",
        )
    if settings.unused:
        log.info(
            "accepted for compatibility with NVIDIA's GFD, not needed here (gfd talks to no API server): %s",
            ", ".join(settings.unused),
        )

    if settings.mock_profile is not None:
        # A malformed profile is bad input, not a broken GPU stack: say so up front with exit 2.
        from gfd.machine_profile import MachineProfileError, load_machine_profile

        try:
            load_machine_profile(settings.mock_profile)
        except MachineProfileError as err:
            print(f"gfd: error: {err}", file=sys.stderr)
            return 2

    if settings.output_format != "feature-file":
        return _print_template(settings)

    from gfd.daemon import Daemon
    from gfd.durations import format_go_duration
    from gfd.metrics import start_metrics

    interval, expiry = settings.sleep_interval, settings.expiry
    if interval is not None and expiry is not None and expiry < interval * 2:
        log.warning(
            "--expiry %s is under two sleep intervals: labels may lapse between passes",
            format_go_duration(expiry),
        )
    if interval is None and expiry is not None and not settings.oneshot:
        log.warning(
            "--expiry with an infinite sleep interval: labels lapse after %s unrenewed",
            format_go_duration(expiry),
        )
    try:
        metrics = start_metrics(settings.metrics_address)
    except OSError as err:
        host, port = settings.metrics_address or ("", 0)
        reason = err.strerror or err
        print(f"gfd: error: --metrics-address: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 2
    log.info(
        "starting: backend %s, output %s, sleep interval %s, expiry %s, label set %s, MIG strategy %s",
        settings.backend,
        settings.output_file or "stdout",
        format_go_duration(interval) if interval is not None else "infinite",
        format_go_duration(expiry) if expiry is not None else "none",
        settings.label_set,
        settings.mig_strategy,
    )
    daemon = Daemon(settings, metrics=metrics, reload_fn=lambda: load_settings(args, os.environ))
    daemon.install_signal_handlers()
    return daemon.run()


def _print_template(settings: Settings) -> int:
    """One pass, printed as an autoscaler's node template (gfd.nodetemplate): 0, or 1 with one line when
    there are no GPUs to describe."""
    import logging
    from datetime import UTC, datetime

    from gfd.backends import Watching, detect, probe
    from gfd.backends.errors import BackendError
    from gfd.backends.host import with_machine_type
    from gfd.labels import LabelOptions, build_labels
    from gfd.nodetemplate import build_template, notes, render

    log = logging.getLogger("gfd")
    s = settings
    try:
        backend, inv = detect(
            s.backend,
            host_root=s.host_root,
            mock_profile=s.mock_profile,
            with_vgpu=s.with_vgpu,
            driver_root=s.driver_root,
        )
        try:
            if inv is None:
                inv = probe(backend, s.host_root)
        finally:
            if isinstance(backend, Watching):
                backend.close()
    except BackendError as err:
        print(f"gfd: error: {err}", file=sys.stderr)
        return 1
    where = f"{s.mock_profile}" if inv.backend == "mock" else f"the {inv.backend} backend"
    if not inv.devices:
        print(f"gfd: error: {where}: no GPU found, so no node template", file=sys.stderr)
        return 1
    if inv.health is not None and inv.health.failures:
        # A node short of a GPU would give its whole pool a count and labels one GPU short.
        failing = len(inv.health.failures)
        print(
            f"gfd: error: {failing} GPU(s) of this node fail (`gfd doctor` says which): a template made "
            "from it would describe its pool short of them; make it on a healthy node or from a profile",
            file=sys.stderr,
        )
        return 1
    if inv.machine is None and inv.backend == "mock":
        log.warning(
            "%s names no machine: nvidia.com/gpu.machine comes from %s (this host) instead; set machine: "
            "to what the pool's nodes report (their DMI product name, often the instance type)",
            where,
            s.machine_type_file,
        )
    inv = with_machine_type(inv, s.machine_type_file)
    opts = LabelOptions.from_settings(s, datetime.now(UTC))
    labelled = build_labels(inv, opts)
    template = build_template(labelled.labels, inv, opts)
    for warning in (*inv.warnings, *labelled.warnings, *notes(s.output_format, template)):
        log.warning("%s", warning)
    sys.stdout.write(render(s.output_format, template))
    sys.stdout.flush()
    return 0
