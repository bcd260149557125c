"""What both commands serve on /metrics, read back by prometheus_client's own parser of the text format: the
values, the types, and label values and help texts holding the characters the format escapes."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfd.metrics import PrometheusMetrics
from nfd_lite.health import HealthServer
from nfd_lite.metrics import WriterMetrics
from promtext import CONTENT_TYPE, Counter, Gauge, Registry
from tests.test_hostport_serving import _free_port


def _parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_counters_and_gauges_read_back_as_written() -> None:
    registry = Registry()
    plain = Counter("things", "Things seen.", registry=registry)
    by = Counter("errors", 'Errors, by "kind" \\ and\nline.', ["kind"], registry=registry)
    level = Gauge("level", "A level.", registry=registry)
    odd = 'a "quoted" back\\slash\nnewline'
    plain.inc()
    plain.inc(2)
    by.labels(odd).inc()
    by.labels(kind="plain").inc(4)
    level.set(-2.5)
    seconds = [7.0]
    Gauge("since", "Seconds since.", registry=registry).set_function(lambda: seconds[0])
    text = registry.exposition().decode()
    assert _parsed(text) == {
        ("things_total", ()): 3.0,
        ("errors_total", (("kind", odd),)): 1.0,
        ("errors_total", (("kind", "plain"),)): 4.0,
        ("level", ()): -2.5,
        ("since", ()): 7.0,
    }
    seconds[0] = 9.5  # read at each scrape
    assert registry.get_sample_value("since") == 9.5
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert (families["things"].type, families["level"].type) == ("counter", "gauge")
    assert families["errors"].documentation == 'Errors, by "kind" \\ and\nline.'
    assert registry.get_sample_value("errors_total", {"kind": "plain"}) == 4.0
    assert registry.get_sample_value("errors_total", {"kind": "absent"}) is None


def test_a_metric_is_used_as_declared() -> None:
    registry = Registry()
    by = Counter("errors", "Errors.", ["kind"], registry=registry)
    with pytest.raises(ValueError, match="takes the labels kind"):
        by.labels(other="x")
    with pytest.raises(ValueError, match="has labels"):
        by.inc()
    with pytest.raises(ValueError, match="only goes up"):
        Counter("up", "Up.", registry=registry).inc(-1)
    with pytest.raises(ValueError, match="registered already"):
        Gauge("errors", "Again.", registry=registry)


def test_a_gauges_labelled_set_is_replaced_whole() -> None:
    """What was not given again is gone from the exposition, not served at its last value."""
    registry = Registry()
    failing = Gauge("failing", "Failing things.", ["bus_id", "error"], registry=registry)
    failing.replace(
        [({"bus_id": "0000:13:00.0", "error": "lost"}, 1), ({"error": "Xid 79", "bus_id": "b"}, 2)]
    )
    assert _parsed(registry.exposition().decode()) == {
        ("failing", (("bus_id", "0000:13:00.0"), ("error", "lost"))): 1.0,
        ("failing", (("bus_id", "b"), ("error", "Xid 79"))): 2.0,
    }
    failing.replace([({"bus_id": "b", "error": "Xid 79"}, 1)])
    assert _parsed(registry.exposition().decode()) == {
        ("failing", (("bus_id", "b"), ("error", "Xid 79"))): 1.0
    }
    failing.replace([])
    text = registry.exposition().decode()
    assert _parsed(text) == {} and "# TYPE failing gauge" in text  # the family stays, without series


def test_a_replaced_set_is_checked_before_anything_changes() -> None:
    registry = Registry()
    failing = Gauge("failing", "Failing things.", ["bus_id"], registry=registry)
    failing.replace([({"bus_id": "a"}, 1)])
    with pytest.raises(ValueError, match="failing takes the labels bus_id"):
        failing.replace([({"bus_id": "b"}, 1), ({"bus": "c"}, 1)])
    with pytest.raises(ValueError, match=r"failing: the series \{'bus_id': 'b'\} is given twice"):
        failing.replace([({"bus_id": "b"}, 1), ({"bus_id": "b"}, 1)])
    assert registry.get_sample_value("failing", {"bus_id": "a"}) == 1.0  # still the last good set
    with pytest.raises(ValueError, match="level has no labels"):
        Gauge("level", "A level.", registry=registry).replace([])


def _scrape(port: int) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


def test_both_commands_serve_their_metrics_in_the_text_format() -> None:
    writer = WriterMetrics()
    writer.api_errors.labels("429").inc()
    port = _free_port()
    server = HealthServer(f"127.0.0.1:{port}", writer, lambda: True, lambda: True).start()
    try:
        content_type, text = _scrape(port)
    finally:
        server.stop()
    assert content_type == CONTENT_TYPE
    assert _parsed(text)[("nfd_lite_api_errors_total", (("code", "429"),))] == 1.0

    daemon = PrometheusMetrics()
    daemon.pass_done(ok=False, layer="nvml", labels=None, now=0.0)
    port = _free_port()
    daemon.serve("127.0.0.1", port)
    content_type, text = _scrape(port)
    assert content_type == CONTENT_TYPE
    assert _parsed(text)[("gfd_errors_total", (("layer", "nvml"),))] == 1.0
    assert _parsed(text)[("gfd_passes_total", ())] == 1.0
