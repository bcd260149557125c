"""Prometheus metrics of the daemon loop (``promtext``) and its readiness (/readyz, ``gfd.readiness``), kept
and served only with --metrics-address."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gfd.readiness import STARTING, Readiness

if TYPE_CHECKING:
    from gfd.inventory import GpuFailure
    from hostport.serving import RouteServer


class Metrics:
    """The no-op recorder; ``PrometheusMetrics`` records for real."""

    serving = False  # whether /readyz and /metrics are served, so that the log may point at them

    def pass_done(self, *, ok: bool, layer: str | None, labels: int | None, now: float) -> None:
        """One probe-and-label pass ended; ``layer`` names the broken layer when it failed."""

    def file_written(self) -> None:
        """The feature file was rewritten."""

    def labels_expire(self, expiry: datetime | None) -> None:
        """The labels the feature file holds now expire at ``expiry`` (None: never)."""

    def gpus(self, *, answering: int, failing: Sequence[GpuFailure]) -> None:
        """A pass found ``answering`` GPUs that can be used and the ``failing`` ones that cannot."""

    def gpu_failed(self, *, layer: str, error: str) -> None:
        """A GPU started failing (said once while it lasts): ``error`` as NVML names it, or "Xid 79"."""

    def readiness(self, state: Readiness) -> None:
        """The last pass's verdict, for /readyz and gfd_no_gpu."""


class PrometheusMetrics(Metrics):
    def __init__(self, registry: Any = None) -> None:
        from promtext import Counter, Gauge, Registry

        self.registry = registry if registry is not None else Registry()
        r = self.registry
        self.passes = Counter("gfd_passes", "Probe-and-label passes run.", registry=r)
        self.errors = Counter("gfd_errors", "Failed passes, by the layer that failed.", ["layer"], registry=r)
        self.last_success = Gauge(
            "gfd_last_success_timestamp_seconds", "When a pass last produced labels (Unix time).", registry=r
        )
        self.labels = Gauge("gfd_labels", "Labels produced by the last good pass.", registry=r)
        self.writes = Counter("gfd_file_writes", "Times the feature file was rewritten.", registry=r)
        self.expiry = Gauge(
            "gfd_labels_expiry_timestamp_seconds",
            "When the labels in the feature file expire unless a good pass pushes it forward (Unix time); "
            "0 when they never expire.",
            registry=r,
        )
        self.answering = Gauge("gfd_gpus_answering", "GPUs that answered the last pass.", registry=r)
        self.failing = Gauge("gfd_gpus_failing", "GPUs the last pass found unusable.", registry=r)
        self.failing_gpus = Gauge(
            "gfd_gpu_failing",
            "1 for each GPU the last pass found unusable, served only while it is: bus_id is its PCI "
            'address as sysfs names it ("0000:3b:00.0"), or where nothing told it NVML\'s index ("index 3"), '
            'else "unknown" (2 then for two GPUs alike); layer and error as in gfd_gpu_failures_total. '
            "None on backends that cannot tell a GPU's health (Jetson files, machine profiles).",
            ["bus_id", "layer", "error"],
            registry=r,
        )
        self.failures = Counter(
            "gfd_gpu_failures",
            "GPUs found failing, counted when each starts to fail, by layer and error.",
            ["layer", "error"],
            registry=r,
        )
        self.no_gpu = Gauge(
            "gfd_no_gpu",
            "1 while the last pass found no GPU to label (NVML missing or failing, no device, no Jetson "
            "files, every GPU failing): /readyz fails and the log says why; else 0.",
            registry=r,
        )
        self.state = STARTING  # replaced whole by the loop, read by the server thread

    def pass_done(self, *, ok: bool, layer: str | None, labels: int | None, now: float) -> None:
        self.passes.inc()
        if ok:
            self.last_success.set(now)
            if labels is not None:
                self.labels.set(labels)
        else:
            self.errors.labels(layer=layer or "unknown").inc()

    def file_written(self) -> None:
        self.writes.inc()

    def labels_expire(self, expiry: datetime | None) -> None:
        self.expiry.set(expiry.timestamp() if expiry is not None else 0)

    def gpus(self, *, answering: int, failing: Sequence[GpuFailure]) -> None:
        self.answering.set(answering)
        # Replaced whole: a GPU that answers again leaves the scrape, so its alert resolves.
        each = Tally((_bus_id(f), f.layer, f.error) for f in failing)
        self.failing_gpus.replace(
            ({"bus_id": bus_id, "layer": layer, "error": error}, n)
            for (bus_id, layer, error), n in each.items()
        )
        self.failing.set(len(failing))

    def gpu_failed(self, *, layer: str, error: str) -> None:
        self.failures.labels(layer=layer, error=error).inc()

    def readiness(self, state: Readiness) -> None:
        if state.no_gpu is not None:  # None: the pass could not tell, the last answer stands
            self.no_gpu.set(1 if state.no_gpu else 0)
        self.state = state

    def readyz(self) -> tuple[int, bytes, str]:
        reason = self.state.reason
        if reason is None:
            return (200, b"ok\n", "text/plain")
        # One line, for whoever reads it with curl: the kubelet's event says only "statuscode: 503".
        line = f"not ok: {' '.join(reason.split())}\n"
        return (503, line.encode("utf-8", "replace"), "text/plain; charset=utf-8")

    def serve(self, host: str, port: int) -> RouteServer:
        from hostport.serving import RouteServer  # within a connection cap, each connection timing out
        from promtext import CONTENT_TYPE

        routes = {
            "/metrics": lambda: (200, self.registry.exposition(), CONTENT_TYPE),
            "/readyz": self.readyz,
        }
        server = RouteServer(host, port, routes, name="gfd-metrics").start()
        self.serving = True
        return server


def _bus_id(failure: GpuFailure) -> str:
    """What names the GPU best: its bus address, else NVML's index (see gfd_gpu_failing's help)."""
    if failure.pci_bus_id:
        return failure.pci_bus_id
    return f"index {failure.index}" if failure.index is not None else "unknown"


def start_metrics(address: tuple[str, int] | None) -> Metrics:
    """A recorder for the daemon: served on ``address``, or the no-op one when there is none."""
    if address is None:
        return Metrics()
    metrics = PrometheusMetrics()
    metrics.serve(*address)
    return metrics
