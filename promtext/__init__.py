"""Counters and gauges in Prometheus' text exposition format (version 0.0.4): what both commands' /metrics
serve, in a registry per program (tests run several in one process).

A hand-written subset, not prometheus_client: that package's import alone (its HTTP servers, WSGI, ASGI,
process and platform collectors) held about 4 MiB of every node's memory for some ten metrics per program
(figures in benchmarks/README.md). This is all the two commands use: counters and gauges, with or without
labels (a gauge's labelled set replaced whole, as a pass finds it), read by tests as ``get_sample_value``
reads them in prometheus_client.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Sample = tuple[str, dict[str, str], float]


class Registry:
    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def register(self, metric: _Metric) -> None:
        if any(m.name == metric.name for m in self._metrics):
            raise ValueError(f"metric {metric.name} is registered already")
        self._metrics.append(metric)

    def samples(self) -> Iterator[Sample]:
        for metric in self._metrics:
            yield from metric.samples()

    def get_sample_value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of sample ``name`` (``x_total`` for counter ``x``) with exactly ``labels``, or None."""
        wanted = dict(labels or {})
        return next(
            (value for sample, got, value in self.samples() if sample == name and got == wanted), None
        )

    def exposition(self) -> bytes:
        lines: list[str] = []
        for metric in self._metrics:
            lines.append(f"# HELP {metric.name} {_escape_help(metric.help)}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            lines.extend(
                f"{sample}{_labels_text(labels)} {_number(value)}"
                for sample, labels, value in metric.samples()
            )
        return ("\n".join(lines) + "\n").encode()


class _Metric:
    kind = ""
    suffix = ""

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = (), *, registry: Registry) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], float] = {} if self.labelnames else {(): 0.0}
        registry.register(self)

    def labels(self, *values: str, **labels: str) -> _Child:
        """The series with these label values, given in order or by name."""
        if values and not labels and len(values) == len(self.labelnames):
            labels = dict(zip(self.labelnames, values, strict=True))
        elif values:
            raise ValueError(f"{self.name} takes the labels {', '.join(self.labelnames)}")
        key = self._key(labels)
        with self._lock:
            self._values.setdefault(key, 0.0)
        return _Child(self, key)

    def _key(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {', '.join(self.labelnames)}")
        return tuple(str(labels[name]) for name in self.labelnames)

    def samples(self) -> Iterator[Sample]:
        with self._lock:
            values = sorted(self._values.items())
        for key, value in values:
            yield self.name + self.suffix, dict(zip(self.labelnames, key, strict=True)), value

    def _add(self, key: tuple[str, ...], amount: float) -> None:
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def _set(self, key: tuple[str, ...], value: float) -> None:
        with self._lock:
            self._values[key] = float(value)

    def _unlabelled(self) -> tuple[str, ...]:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels: use .labels(...)")
        return ()


class _Child:
    """One labelled series of a metric."""

    def __init__(self, metric: _Metric, key: tuple[str, ...]) -> None:
        self.metric, self.key = metric, key

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0 and isinstance(self.metric, Counter):
            raise ValueError("a counter only goes up")
        self.metric._add(self.key, amount)

    def set(self, value: float) -> None:
        if not isinstance(self.metric, Gauge):
            raise ValueError("only a gauge is set")
        self.metric._set(self.key, value)


class Counter(_Metric):
    kind = "counter"
    suffix = "_total"

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self._add(self._unlabelled(), amount)


class Gauge(_Metric):
    kind = "gauge"
    _function: Callable[[], float] | None = None

    def set_function(self, function: Callable[[], float]) -> None:
        """Take the value from ``function`` at each read (a scrape), instead of a value set."""
        self._function = function

    def samples(self) -> Iterator[Sample]:
        if self._function is not None:
            yield self.name, {}, float(self._function())
            return
        yield from super().samples()

    def set(self, value: float) -> None:
        self._set(self._unlabelled(), value)

    def inc(self, amount: float = 1.0) -> None:
        self._add(self._unlabelled(), amount)

    def replace(self, series: Iterable[tuple[Mapping[str, str], float]]) -> None:
        """Serve exactly ``series`` (each its labels by name and its value) from now on: a series not given
        is dropped, not left at its last value, and no scrape sees the set half replaced."""
        if not self.labelnames:
            raise ValueError(f"{self.name} has no labels: use .set(...)")
        values: dict[tuple[str, ...], float] = {}
        for labels, value in series:
            key = self._key(labels)
            if key in values:
                raise ValueError(f"{self.name}: the series {dict(labels)} is given twice")
            values[key] = float(value)
        with self._lock:
            self._values = values


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _labels_text(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_label_value(value)}"' for name, value in labels.items()) + "}"


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
