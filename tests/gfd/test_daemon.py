"""The daemon loop against the mock backend: what lands in the feature file, and when."""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gfd.backends import Backend, BackendChoice
from gfd.backends.errors import BackendError
from gfd.config import load_settings
from gfd.daemon import Daemon, reread_settings
from gfd.expiry import ExpiryPolicy
from gfd.inventory import Device, Inventory
from gfd.loopcontrol import LoopControl
from gfd.metrics import PrometheusMetrics
from gfd.readiness import NO_NVML_DEVICE
from gfd.settings import ConfigError, Settings
from gfd.writer import read_feature_file

PROFILES = Path(__file__).parent / "profiles_cli"
T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "node.yaml"
    shutil.copy(PROFILES / "one-t4.yaml", path)
    return path


def settings(profile: Path, out: Path, *extra: str) -> Settings:
    argv = ["--backend", "mock", "--mock-profile", str(profile), "--output-file", str(out), *extra]
    return load_settings(argv, {})


def file_state(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def test_first_pass_writes_labels_with_an_expiry_three_intervals_ahead(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "features" / "gfd"
    result = Daemon(settings(profile, out), clock=Clock()).run_pass()
    assert result.ok and result.written
    labels, expiry = read_feature_file(out) or ({}, None)
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.simulated"] == "true"
    assert expiry == T0 + timedelta(minutes=3)


def test_file_is_rewritten_only_when_labels_change(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    clock = Clock()
    daemon = Daemon(settings(profile, out, "--expiry", "1h"), clock=clock)
    daemon.run_pass()
    before = file_state(out)
    for _ in range(5):
        clock.advance(60)
        assert daemon.run_pass().written is False
    assert file_state(out) == before

    shutil.copy(PROFILES / "two-t4.yaml", profile)  # a GPU appears
    clock.advance(60)
    assert daemon.run_pass().written is True
    assert (read_feature_file(out) or ({}, None))[0]["nvidia.com/gpu.count"] == "2"


def test_expiry_is_pushed_forward_before_it_can_lapse(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    clock = Clock()
    daemon = Daemon(settings(profile, out), clock=clock)  # 60s interval, 3m expiry
    writes = []
    for _ in range(10):
        writes.append(daemon.run_pass().written)
        _, expiry = read_feature_file(out) or ({}, None)
        assert expiry is not None
        # Even if the next pass comes late by half an interval, the labels are still valid then.
        assert expiry - clock.now > timedelta(seconds=90)
        clock.advance(60)
    assert writes == [True, False, True, False, True, False, True, False, True, False]


def test_a_restarted_daemon_does_not_rewrite_an_up_to_date_file(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    clock = Clock()
    Daemon(settings(profile, out), clock=clock).run_pass()
    before = file_state(out)
    clock.advance(20)
    assert Daemon(settings(profile, out), clock=clock).run_pass().written is False
    assert file_state(out) == before


def test_the_expiry_metric_tells_when_the_labels_lapse_as_the_file_says(
    profile: Path, tmp_path: Path
) -> None:
    """gfd_labels_expiry_timestamp_seconds, which the LabelsExpiring alert reads: the file's expiry when
    written, when found up to date at start, and standing still while passes fail; 0 without expiry."""
    out = tmp_path / "gfd"
    clock = Clock()
    Daemon(settings(profile, out), clock=clock).run_pass()
    written = (read_feature_file(out) or ({}, None))[1]
    assert written == clock.now + timedelta(minutes=3)
    clock.advance(20)
    metrics = PrometheusMetrics()
    restarted = Daemon(settings(profile, out, "--fail-on-init-error=false"), clock=clock, metrics=metrics)
    assert restarted.run_pass().written is False
    expiry = lambda: metrics.registry.get_sample_value("gfd_labels_expiry_timestamp_seconds")  # noqa: E731
    assert expiry() == written.timestamp()
    shutil.copy(PROFILES / "broken.yaml", profile)
    for _ in range(3):
        clock.advance(60)
        assert not restarted.run_pass().ok
    assert expiry() == written.timestamp()  # nearer each failed pass: the alert's lead
    never = PrometheusMetrics()
    shutil.copy(PROFILES / "one-t4.yaml", profile)
    Daemon(settings(profile, tmp_path / "gfd2", "--oneshot"), clock=clock, metrics=never).run_pass()
    assert never.registry.get_sample_value("gfd_labels_expiry_timestamp_seconds") == 0


def test_failed_probe_keeps_the_last_good_labels_untouched(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    clock = Clock()
    metrics = PrometheusMetrics()
    daemon = Daemon(settings(profile, out, "--fail-on-init-error=false"), clock=clock, metrics=metrics)
    daemon.run_pass()
    good = out.read_text()

    shutil.copy(PROFILES / "broken.yaml", profile)
    for _ in range(4):  # past the point where the expiry would have been pushed
        clock.advance(60)
        result = daemon.run_pass()
        assert not result.ok
        assert result.layer == "profile"
        assert result.error is not None and "memory_mib" in result.error
    assert out.read_text() == good  # neither wrong labels nor a fresh expiry

    shutil.copy(PROFILES / "one-t4.yaml", profile)
    clock.advance(60)
    result = daemon.run_pass()
    assert result.ok and result.written  # back, with the expiry pushed forward again
    assert (read_feature_file(out) or ({}, None))[1] == clock.now + timedelta(minutes=3)
    sample = metrics.registry.get_sample_value
    assert sample("gfd_errors_total", {"layer": "profile"}) == 4
    assert sample("gfd_passes_total") == 6
    assert sample("gfd_file_writes_total") == 2
    assert sample("gfd_labels") == len(result.labels or {})
    assert sample("gfd_last_success_timestamp_seconds") == clock.now.timestamp()


def test_backend_is_detected_again_after_a_failure(profile: Path, tmp_path: Path) -> None:
    # As when the driver is installed after the pod started: the first passes find nothing.
    out = tmp_path / "gfd"
    inventory = Inventory(backend="mock", driver_version="550.54.15", cuda_driver_version=12040)
    calls: list[str] = []
    answers: list[Callable[[], Inventory]] = []

    class Flaky:
        name = "mock"

        def probe(self) -> Inventory:
            return answers.pop(0)()

    def detect(name: str, **kwargs: object) -> tuple[Flaky, None]:
        calls.append(name)
        if len(calls) < 3:
            raise BackendError("driver", "NVIDIA driver not loaded")
        return Flaky(), None

    def lost() -> Inventory:
        raise BackendError("hardware", "GPU 0 fell off the bus")

    answers[:] = [lambda: inventory, lost, lambda: inventory]
    daemon = Daemon(settings(profile, out, "--fail-on-init-error=false"), clock=Clock(), detect_fn=detect)
    assert [daemon.run_pass().ok for _ in range(3)] == [False, False, True]
    assert out.exists()
    assert daemon.run_pass().ok is False  # the probe failed: detect again next time
    assert daemon.run_pass().ok is True
    assert len(calls) == 4


def test_machine_type_file_fills_in_what_the_backend_left_open(tmp_path: Path) -> None:
    profile = tmp_path / "node.yaml"
    profile.write_text((PROFILES / "one-t4.yaml").read_text().replace("machine: Test Box\n", ""))
    machine = tmp_path / "product_name"
    machine.write_text("PowerEdge R750xa\n")
    out = tmp_path / "gfd"
    daemon = Daemon(settings(profile, out, "--machine-type-file", str(machine)), clock=Clock())
    assert (daemon.run_pass().labels or {})["nvidia.com/gpu.machine"] == "PowerEdge-R750xa"


def test_a_fatal_first_failure_ends_the_loop_with_status_1_and_no_file(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    daemon = Daemon(settings(tmp_path / "absent.yaml", out), clock=Clock())
    assert daemon.run() == 1
    assert not out.exists()


def test_after_a_success_failures_are_retried_even_when_init_errors_are_fatal(
    profile: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gfd"
    daemon = Daemon(settings(profile, out, "--sleep-interval", "10ms"))
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(daemon.run()))
    thread.start()
    try:
        wait_for(out.exists)
        shutil.copy(PROFILES / "broken.yaml", profile)
        wait_for(lambda: bool(daemon.failures.current))
        shutil.copy(PROFILES / "two-t4.yaml", profile)
        wait_for(lambda: "nvidia.com/gpu.count=2" in out.read_text())
    finally:
        daemon.stop()
        thread.join(10)
    assert status == [0]
    assert out.exists()


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def start_mock_daemon(profile: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    """The gfd daemon as its own process on a mock profile, stderr captured."""
    command = [sys.executable, "-m", "gfd", "--backend", "mock", "--mock-profile", str(profile)]
    return subprocess.Popen([*command, "--output-file", str(out), *args], stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_daemon_cleanly_and_leaves_the_file(
    signum: int, profile: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gfd"
    proc = start_mock_daemon(profile, out, "--sleep-interval", "50ms")
    try:
        wait_for(out.exists)
        written = out.read_text()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert out.read_text() == written
    assert "Traceback" not in err
    assert f"{signal.Signals(signum).name} received: stopping; {out} stays in place" in err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def sharing_config(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"      - name: nvidia.com/gpu\n        replicas: {replicas}\n"
    )


def test_sighup_rereads_the_config_file_and_relabels_at_once(profile: Path, tmp_path: Path) -> None:
    # NVIDIA's config-manager sidecar switches the config file, then sends SIGHUP.
    out, config = tmp_path / "gfd", tmp_path / "config.yaml"
    config.write_text(sharing_config(2))
    proc = start_mock_daemon(profile, out, "--sleep-interval", "1h", "--config-file", str(config))
    try:
        wait_for(lambda: out.exists() and "nvidia.com/gpu.replicas=2\n" in out.read_text())
        config.write_text("version: v1\nsharing: [")  # a broken file: keep going with what works
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None
        config.write_text(sharing_config(4))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "nvidia.com/gpu.replicas=4\n" in out.read_text())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "reload:" in err and "not valid YAML" in err
    assert "Traceback" not in err


class Scripted:
    """A backend that answers each probe with the next of ``answers``: an inventory, or the error raised."""

    name = "mock"

    def __init__(self, *answers: Inventory | BackendError) -> None:
        self.answers = list(answers)

    def probe(self) -> Inventory:
        answer = self.answers.pop(0)
        if isinstance(answer, BackendError):
            raise answer
        return answer

    def detect(self, *args: object, **kwargs: object) -> tuple[Scripted, None]:
        return self, None


def scripted_daemon(tmp_path: Path, backend: Scripted) -> Daemon:
    return Daemon(settings(tmp_path / "p.yaml", tmp_path / "gfd"), clock=Clock(), detect_fn=backend.detect)


def test_a_warning_that_repeats_every_pass_is_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    warned = Inventory(backend="mock", driver_version="550.54.15", warnings=("GPU 0: memory not reported",))
    quiet = Inventory(backend="mock", driver_version="550.54.15")
    failed = BackendError("profile", "unreadable")
    daemon = scripted_daemon(
        tmp_path, Scripted(warned, warned, warned, quiet, warned, warned, failed, warned)
    )
    with caplog.at_level(logging.WARNING, logger="gfd"):
        results = [daemon.run_pass().ok for _ in range(8)]
    assert results == [True] * 6 + [False, True]
    # Once, again after it went away and came back, and again after a pass that could not look.
    assert caplog.messages.count("GPU 0: memory not reported") == 3


def test_a_labeler_warning_is_logged_once_while_it_repeats(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    two_fabrics = tuple(Device(index=i, name="NVIDIA GB200", clique=f"u.{i}") for i in range(2))
    one_fabric = tuple(Device(index=i, name="NVIDIA GB200", clique="u.0") for i in range(2))
    split, joined = (Inventory(backend="mock", devices=d) for d in (two_fabrics, one_fabric))
    daemon = scripted_daemon(tmp_path, Scripted(split, split, split, joined, split))
    with caplog.at_level(logging.WARNING, logger="gfd"):
        labels = [daemon.run_pass().labels or {} for _ in range(5)]
    assert ["nvidia.com/gpu.clique" in got for got in labels] == [False, False, False, True, False]
    warning = "GPUs report different fabric cliques (u.0, u.1); no clique label"
    assert caplog.messages == [warning, warning]


def test_a_node_without_gpus_says_so_once_not_every_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = Inventory(backend="nvml", driver_version="550.54.15")
    daemon = scripted_daemon(tmp_path, Scripted(empty, empty, empty))
    with caplog.at_level(logging.WARNING, logger="gfd"):
        assert all(daemon.run_pass().ok for _ in range(3))
    # Which layers to check, and where to look next (no metrics served here, so no /readyz to name).
    assert caplog.messages == [
        f"{NO_NVML_DEVICE}; writing no GPU labels; `gfd doctor` on this node checks every layer"
    ]


def test_oneshot_always_ends_even_when_init_errors_are_not_fatal(tmp_path: Path) -> None:
    # NVIDIA's oneshot with --fail-on-init-error=false labels once and exits 0; it must not loop.
    out = tmp_path / "gfd"
    tries: list[str] = []

    def detect(name: BackendChoice, **kwargs: Any) -> tuple[Backend, Inventory | None]:
        tries.append(name)
        raise BackendError("driver", "the NVIDIA kernel module is not loaded")

    s = settings(
        tmp_path / "p.yaml", out, "--oneshot", "--fail-on-init-error=false", "--sleep-interval", "10ms"
    )
    assert Daemon(s, detect_fn=detect).run() == 0
    assert tries == ["mock"]
    assert not out.exists()  # a failed pass writes nothing
    assert Daemon(settings(tmp_path / "p.yaml", out, "--oneshot"), detect_fn=detect).run() == 1


def test_a_node_whose_nvml_sees_no_gpu_is_labelled_without_gpu_labels(tmp_path: Path) -> None:
    # As NVIDIA's: no device, no device labels (no machine, no versions), and no failure.
    out = tmp_path / "gfd"

    class NoGpu:
        name = "nvml"

        def probe(self) -> Inventory:
            return Inventory(backend="nvml", driver_version="550.54.15", cuda_driver_version=12040)

    s = settings(tmp_path / "p.yaml", out, "--oneshot", "--timestamp")
    assert Daemon(s, clock=Clock(), detect_fn=lambda *a, **k: (NoGpu(), None)).run() == 0
    labels, _ = read_feature_file(out) or ({}, None)
    assert labels == {"nvidia.com/gfd.timestamp": str(int(T0.timestamp()))}


def test_the_stop_message_names_the_file_only_when_there_is_one(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    def detect(name: BackendChoice, **kwargs: Any) -> tuple[Backend, Inventory | None]:
        raise BackendError("driver", "the NVIDIA kernel module is not loaded")

    logger = logging.getLogger("gfd")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        daemon = Daemon(
            settings(tmp_path / "p.yaml", out, "--fail-on-init-error=false"), clock=Clock(), detect_fn=detect
        )
        thread = threading.Thread(target=daemon.run)
        thread.start()
        wait_for(lambda: bool(daemon.failures.current))
        daemon.stop()
        thread.join(10)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert "asked to stop: stopping" in records
    assert not any(str(out) in r for r in records if "stopping" in r)


def test_an_infinite_interval_labels_once_then_waits_for_sighup(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    metrics = PrometheusMetrics()
    daemon = Daemon(settings(profile, out, "--sleep-interval", "infinite"), metrics=metrics)
    thread = threading.Thread(target=daemon.run)
    thread.start()
    try:
        wait_for(out.exists)
        assert "expiry-time" not in out.read_text()  # nothing would renew it
        shutil.copy(PROFILES / "two-t4.yaml", profile)
        daemon.request_reload()  # what SIGHUP does
        wait_for(lambda: "nvidia.com/gpu.count=2" in out.read_text())
    finally:
        daemon.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert metrics.registry.get_sample_value("gfd_passes_total") == 2


# --- the parts the daemon is made of ---


@pytest.mark.parametrize(
    ("span", "interval", "left", "due"),
    [
        (timedelta(minutes=3), timedelta(seconds=60), timedelta(seconds=91), False),
        (timedelta(minutes=3), timedelta(seconds=60), timedelta(seconds=89), True),  # 1.5 intervals
        (timedelta(hours=1), timedelta(seconds=60), timedelta(minutes=31), False),
        (timedelta(hours=1), timedelta(seconds=60), timedelta(minutes=29), True),  # half the span
        (timedelta(hours=1), None, timedelta(minutes=29), True),
        (timedelta(hours=1), None, timedelta(minutes=31), False),
    ],
)
def test_the_expiry_is_pushed_forward_at_half_its_span_or_1_5_intervals_before_it_lapses(
    span: timedelta, interval: timedelta | None, left: timedelta, due: bool
) -> None:
    assert ExpiryPolicy(span, interval).due(T0 + left, T0) is due


def test_an_expiry_is_added_when_missing_and_dropped_when_no_longer_wanted() -> None:
    assert ExpiryPolicy(timedelta(minutes=3), None).due(None, T0) is True
    assert ExpiryPolicy(None, timedelta(seconds=60)).due(T0 + timedelta(days=1), T0) is True
    assert ExpiryPolicy(None, timedelta(seconds=60)).due(None, T0) is False
    assert ExpiryPolicy(None, None).expiry_at(T0) is None
    late = T0 + timedelta(microseconds=999999)
    assert ExpiryPolicy(timedelta(minutes=3), None).expiry_at(late) == T0 + timedelta(minutes=3)


def test_a_failure_is_logged_once_while_it_repeats_and_the_recovery_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a100 = Device(index=0, name="NVIDIA A100")
    good = Inventory(backend="mock", driver_version="550.54.15", devices=(a100,))
    not_loaded, lost = BackendError("driver", "not loaded"), BackendError("hardware", "GPU 0 lost")
    answers = [not_loaded, good, not_loaded, not_loaded, not_loaded, lost, good, good, not_loaded]
    daemon = scripted_daemon(tmp_path, Scripted(*answers))
    with caplog.at_level(logging.INFO, logger="gfd"):
        for _ in answers:
            daemon.run_pass()
    # The first failure ends a daemon whose init errors are fatal: nothing to add. Later ones point on.
    doctor = "; `gfd doctor` on this node checks every layer"
    assert caplog.messages == [
        "driver: not loaded",
        "pass succeeded again (backend mock)",
        f"driver: not loaded; the labels already written stay{doctor}",
        f"hardware: GPU 0 lost; the labels already written stay{doctor}",
        "pass succeeded again (backend mock)",
        f"driver: not loaded; the labels already written stay{doctor}",
    ]


def test_a_request_from_another_thread_wakes_the_sleeping_loop() -> None:
    control = LoopControl()
    with control.running():
        threading.Timer(0.05, control.request_reload).start()
        control.sleep(None)  # for ever, but for the request
        assert control.take_reload() is True
        assert control.take_reload() is False
        control.stop()
        control.sleep(None)  # asked already: returns at once
    assert control.stop_reason == "asked to stop"


def test_a_reload_keeps_the_settings_when_the_new_ones_cannot_be_read(
    profile: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    current = settings(profile, tmp_path / "gfd")

    def broken() -> Settings:
        raise ConfigError("--config-file x.yaml: not valid YAML")

    assert reread_settings(current, None) is None
    assert reread_settings(current, lambda: current) is None
    with caplog.at_level(logging.ERROR, logger="gfd"):
        assert reread_settings(current, broken) is None
    assert caplog.messages == ["reload: --config-file x.yaml: not valid YAML; keeping the settings in use"]
    changed = settings(profile, tmp_path / "other")
    assert reread_settings(current, lambda: changed) is changed


def test_the_daemon_takes_its_settings_from_gfd_settings_not_the_command_line_parser() -> None:
    # Settings and ConfigError have one home, gfd.settings; argparse is the command line's (gfd.config), and
    # the daemon and its labelers run without it.
    code = (
        "import sys, gfd.daemon, gfd.labels.common\n"
        "print(sorted(m for m in ('argparse', 'gfd.config') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root)
    assert (run.returncode, run.stdout.strip()) == (0, "[]"), run.stderr
