"""Prometheus metrics of the daemon loop (``promtext``), kept and served only with --metrics-address."""

from __future__ import annotations

from typing import Any


class Metrics:
    """The no-op recorder; ``PrometheusMetrics`` records for real."""

    def pass_done(self, *, ok: bool, layer: str | None, labels: int | None, now: float) -> None:
        """One probe-and-label pass ended; ``layer`` names the broken layer when it failed."""

    def file_written(self) -> None:
        """The feature file was rewritten."""

    def gpus(self, *, answering: int, failing: int) -> None:
        """A pass found ``answering`` GPUs that can be used and ``failing`` that cannot."""

    def gpu_failed(self, *, layer: str, error: str) -> None:
        """A GPU started failing (said once while it lasts): ``error`` as NVML names it, or "Xid 79"."""


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
        self.answering = Gauge("gfd_gpus_answering", "GPUs that answered the last pass.", registry=r)
        self.failing = Gauge("gfd_gpus_failing", "GPUs the last pass found unusable.", registry=r)
        self.failures = Counter(
            "gfd_gpu_failures",
            "GPUs found failing, counted when each starts to fail, by layer and error.",
            ["layer", "error"],
            registry=r,
        )

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

    def gpus(self, *, answering: int, failing: int) -> None:
        self.answering.set(answering)
        self.failing.set(failing)

    def gpu_failed(self, *, layer: str, error: str) -> None:
        self.failures.labels(layer=layer, error=error).inc()

    def serve(self, host: str, port: int) -> None:
        from hostport.serving import RouteServer  # within a connection cap, each connection timing out
        from promtext import CONTENT_TYPE

        metrics = {"/metrics": lambda: (200, self.registry.exposition(), CONTENT_TYPE)}
        RouteServer(host, port, metrics, name="gfd-metrics").start()


def start_metrics(address: tuple[str, int] | None) -> Metrics:
    """A recorder for the daemon: served on ``address``, or the no-op one when there is none."""
    if address is None:
        return Metrics()
    metrics = PrometheusMetrics()
    metrics.serve(*address)
    return metrics
