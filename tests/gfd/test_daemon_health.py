"""The daemon over NVML when a GPU fails and comes back: what the feature file says and when it is written,
what the log says (once), what the metrics count, and an Xid waking the loop between passes."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from gfd.backends.nvml import NvmlBackend
from gfd.config import load_settings
from gfd.daemon import Daemon
from gfd.labels import health
from gfd.machine_profile import load_machine_profile
from gfd.metrics import PrometheusMetrics
from gfd.writer import read_feature_file
from tests.fakes.fake_nvml import FakeNvml, install_fake_nvml
from tests.fakes.nvml_faults import HANG, LOST, READ_DEADLINE_S
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
MP = pytest.MonkeyPatch


def daemon_over(
    monkeypatch: MP, tmp_path: Path, *flags: str, metrics: PrometheusMetrics | None = None
) -> tuple[FakeNvml, Daemon, Path]:
    fake = install_fake_nvml(monkeypatch, load_machine_profile(ROOT / "profiles" / "dgx-a100-mig.yaml"))
    root = fake.write_host_root(tmp_path / "host")
    out = tmp_path / "features" / "gfd"
    argv = ["--backend", "nvml", "--host-root", str(root), "--output-file", str(out), *flags]
    backend = NvmlBackend(host_root=root, gpu_timeout=READ_DEADLINE_S)
    daemon = Daemon(load_settings(argv, {}), metrics=metrics, detect_fn=lambda *a, **k: (backend, None))
    return fake, daemon, out


def labels_in(out: Path) -> dict[str, str]:
    found = read_feature_file(out)
    assert found is not None
    return found[0]


def sample(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_gpu_that_fails_and_answers_again_costs_one_rewrite_each_way(
    monkeypatch: MP, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = PrometheusMetrics()
    fake, daemon, out = daemon_over(monkeypatch, tmp_path, "--expiry", "24h", metrics=metrics)
    healthy = daemon.run_pass()
    assert healthy.ok and healthy.written and labels_in(out)[health.HEALTH] == "ok"

    fake.break_gpu(3, LOST)
    with caplog.at_level(logging.WARNING, logger="gfd"):
        sick = [daemon.run_pass() for _ in range(4)]
    assert all(p.ok for p in sick)
    assert [p.written for p in sick] == [True, False, False, False]  # one rewrite, then nothing
    degraded = labels_in(out)
    assert degraded[health.HEALTH] == "degraded"
    assert degraded["nvidia.com/gpu.count"] == "7" and degraded[health.ON_BUS] == "8"
    said = [r.getMessage() for r in caplog.records if "0000:37:00.0" in r.getMessage()]
    assert len(said) == 1 and "NVML_ERROR_GPU_IS_LOST" in said[0]  # said once while it lasts
    assert sample(metrics, "gfd_gpu_failures_total", layer="hardware", error="NVML_ERROR_GPU_IS_LOST") == 1
    assert sample(metrics, "gfd_gpus_failing") == 1 and sample(metrics, "gfd_gpus_answering") == 7
    assert sample(metrics, "gfd_errors_total", layer="hardware") is None  # no pass failed

    fake.heal(3)
    back = [daemon.run_pass() for _ in range(3)]
    assert [p.written for p in back] == [True, False, False]
    assert labels_in(out) == healthy.labels  # exactly the healthy labels again
    assert sample(metrics, "gfd_gpus_failing") == 0
    assert sample(metrics, "gfd_file_writes_total") == 3


def test_a_hung_gpu_keeps_the_loop_going_and_is_said_once(
    monkeypatch: MP, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake, daemon, out = daemon_over(monkeypatch, tmp_path)
    fake.break_gpu(6, HANG)
    with caplog.at_level(logging.WARNING, logger="gfd"):
        results = [daemon.run_pass() for _ in range(3)]
    assert all(r.ok for r in results) and [r.written for r in results] == [True, False, False]
    assert labels_in(out)[health.FAILING] == "1"
    said = [r.getMessage() for r in caplog.records if "NVML_ERROR_TIMEOUT" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("GPU 6 (0000:67:00.0) cannot be used")
    fake.heal(6)


def test_a_fatal_xid_wakes_the_loop_and_marks_the_node_degraded(monkeypatch: MP, tmp_path: Path) -> None:
    # A pass an hour apart: only the Xid can make the next one come sooner.
    fake, daemon, out = daemon_over(monkeypatch, tmp_path, "--sleep-interval", "1h")
    done: dict[str, Any] = {}
    loop = threading.Thread(target=lambda: done.setdefault("code", daemon.run()), daemon=True)
    loop.start()
    try:
        assert eventually(lambda: out.exists() and labels_in(out).get(health.HEALTH) == "ok")
        backend = daemon.backend
        assert isinstance(backend, NvmlBackend) and backend._watch is not None
        assert backend._watch.listening.wait(5)
        fake.xid(2, 79)
        assert eventually(lambda: labels_in(out).get(health.HEALTH) == "degraded")
        assert labels_in(out)[health.ANSWERING] == "7"
    finally:
        daemon.stop()
        loop.join(10)
    assert done.get("code") == 0
    # The event thread closes its NVML session when the loop ended; the loop waits for it only 2 s, which a
    # starved machine can outlast, and a thread still running would close the next test's fake.
    assert eventually(lambda: fake.init_count == 0, timeout=30)


def test_a_oneshot_run_does_not_listen_for_events(monkeypatch: MP, tmp_path: Path) -> None:
    fake, daemon, _ = daemon_over(monkeypatch, tmp_path, "--oneshot")
    assert daemon.run() == 0
    assert fake.calls["nvmlEventSetCreate"] == 0 and fake.init_count == 0
