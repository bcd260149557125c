"""Which GPU fails, on gfd's /metrics: the daemon's loop over the fake NVML serves one gfd_gpu_failing
series per failing GPU, named by its bus address as the log and ``gfd doctor`` name it, and a GPU that
answers again leaves the scrape (its alert resolves) instead of staying at 0."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfd.inventory import GpuFailure
from gfd.metrics import PrometheusMetrics
from tests.fakes.nvml_faults import LOST, GpuFault
from tests.fakes.nvml_wire import ERROR_RESET_REQUIRED
from tests.gfd.test_daemon_health import daemon_over
from tests.test_hostport_serving import _free_port
from tests.waiting import eventually

MP = pytest.MonkeyPatch
Series = dict[tuple[tuple[str, str], ...], float]


def scrape(port: int) -> tuple[Series, float | None]:
    """gfd_gpu_failing's series (their labels) and gfd_gpus_failing, as a scrape reads them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    series: Series = {}
    count = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "gfd_gpu_failing":
                series[tuple(sorted(s.labels.items()))] = s.value
            elif s.name == "gfd_gpus_failing":
                count = s.value
    return series, count


def gpu(bus_id: str, layer: str, error: str) -> tuple[tuple[str, str], ...]:
    return (("bus_id", bus_id), ("error", error), ("layer", layer))


LOST_3 = gpu("0000:37:00.0", "hardware", "NVML_ERROR_GPU_IS_LOST")  # dgx-a100-mig.yaml's GPU 3
MEMORY_6 = gpu("0000:67:00.0", "hardware", "NVML_ERROR_RESET_REQUIRED")  # its GPU 6
# GPU 6 answers all but its memory query (read every pass), waiting for a reset.
RESET_REQUIRED = GpuFault(
    ERROR_RESET_REQUIRED, frozenset({"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"})
)


def test_each_failing_gpu_is_served_by_its_bus_address_until_it_answers_again(
    monkeypatch: MP, tmp_path: Path
) -> None:
    metrics = PrometheusMetrics()
    port = _free_port()
    server = metrics.serve("127.0.0.1", port)
    # A pass an hour apart: each fault is seen by the pass wake() asks for.
    fake, daemon, _ = daemon_over(monkeypatch, tmp_path, "--sleep-interval", "1h", metrics=metrics)
    done: dict[str, Any] = {}
    loop = threading.Thread(target=lambda: done.setdefault("code", daemon.run()), daemon=True)
    loop.start()
    try:
        assert eventually(lambda: scrape(port) == ({}, 0.0), 30), scrape(port)  # healthy: no series

        def after(change: Any, wanted: tuple[Series, float]) -> None:
            change()
            daemon.wake()
            assert eventually(lambda: scrape(port) == wanted, 30), scrape(port)

        after(lambda: fake.break_gpu(3, LOST), ({LOST_3: 1.0}, 1.0))
        after(lambda: fake.break_gpu(6, RESET_REQUIRED), ({LOST_3: 1, MEMORY_6: 1}, 2))
        after(lambda: fake.heal(3), ({MEMORY_6: 1.0}, 1.0))  # gone, not left at 0
        after(lambda: fake.heal(6), ({}, 0.0))
    finally:
        daemon.stop()
        loop.join(10)
        server.stop()
    assert done.get("code") == 0


def test_a_gpu_without_a_known_address_is_named_by_what_is_known() -> None:
    metrics = PrometheusMetrics()
    metrics.gpus(
        answering=5,
        failing=[
            GpuFailure(None, 3, "NVML_ERROR_UNKNOWN", "driver"),
            GpuFailure(None, None, "Xid 79", "hardware"),
            GpuFailure(None, None, "Xid 79", "hardware"),  # two alike: one series counting both
        ],
    )
    value = metrics.registry.get_sample_value
    assert (
        value("gfd_gpu_failing", {"bus_id": "index 3", "layer": "driver", "error": "NVML_ERROR_UNKNOWN"}) == 1
    )
    assert value("gfd_gpu_failing", {"bus_id": "unknown", "layer": "hardware", "error": "Xid 79"}) == 2
    assert value("gfd_gpus_failing") == 3
