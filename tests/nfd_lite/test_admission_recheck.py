"""The admission self-check repeated while the writer runs, against the fake API server evaluating rbac/'s
policy: a binding deleted under the running writer turns /readyz unready with a one-line reason, sets
nfd_lite_admission_policy_enforced to 0 and is said once; the writer keeps writing its labels meanwhile;
the binding restored makes it ready again. The same on the real kube-apiserver:
tests/kube/test_selfcheck_live.py."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nfd_lite.api.errors import ApiError
from nfd_lite.node.selfcheck import MANAGED_FIELDS, TAINTS, AdmissionCheck
from nfd_lite.settings import WriterSettings
from promtext import Gauge, Registry
from tests.apiserver.server import FakeApiServer
from tests.kube.controlplane import free_port
from tests.nfd_lite.harness import NODE, OTHER_NODE, Writer, eventually, node_api, ours

ENFORCED = "nfd_lite_admission_policy_enforced"
WANT = {"nvidia.com/gpu.count": "2"}
INTERVAL = 0.3  # seconds between checks here; 300 by default


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_the_default_interval_is_five_minutes_and_the_flag_sets_it() -> None:
    from nfd_lite.cli import build_parser

    assert WriterSettings.admission_check_interval == 300.0
    assert build_parser().parse_args([]).admission_check_interval == 300.0
    assert build_parser().parse_args(["--admission-check-interval", "30"]).admission_check_interval == 30.0


def test_a_binding_deleted_while_the_writer_runs_is_noticed_and_its_return_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeApiServer() as server:  # enforces rbac/admission-policy.yaml
        server.add_node(NODE)
        server.add_node(OTHER_NODE)
        bindings = server.admission.bindings
        port = free_port()
        settings = {
            "require_admission_policy": True,
            "admission_check_interval": INTERVAL,
            "metrics_address": f"127.0.0.1:{port}",
        }
        with caplog.at_level(logging.INFO, "nfd_lite"), Writer(server, tmp_path, **settings) as w:
            w.write("nvidia.com/gpu.count=2\n")
            assert eventually(
                lambda: ours(server) == {"nvidia.com/gpu.count": "2"} and _readyz(port)[0] == 200
            )
            assert w.metric(ENFORCED) == 1

            server.admission.bindings = []  # kubectl delete validatingadmissionpolicybinding ...
            assert eventually(lambda: _readyz(port)[0] == 503, timeout=30)
            _, body = _readyz(port)
            assert body.count("\n") == 1, body
            assert body.startswith("not ok: the admission policy 'gpu-labeller-nfd-lite' is not enforced: ")
            assert TAINTS in body and MANAGED_FIELDS in body
            assert w.metric(ENFORCED) == 0
            # The writer goes on doing its job: its own labels are as right as before.
            w.write("nvidia.com/gpu.count=4\n")
            assert eventually(lambda: ours(server) == {"nvidia.com/gpu.count": "4"})
            # Each check probes the other Node once (the only request that names it).
            checks = server.count(method="PATCH", path=f"/api/v1/nodes/{OTHER_NODE}")
            assert eventually(
                lambda: server.count(method="PATCH", path=f"/api/v1/nodes/{OTHER_NODE}") > checks + 2
            )
            assert _readyz(port)[0] == 503  # checked again and again, still missing, still unready
            (line,) = _said(caplog, "no longer fences this writer")  # said once, not at every check
            assert "are not refused" in line and "labels are still written" in line and "\n" not in line

            server.admission.bindings = bindings
            assert eventually(lambda: _readyz(port) == (200, "ok\n"), timeout=30)
            assert w.metric(ENFORCED) == 1
            assert _said(caplog, "'gpu-labeller-nfd-lite' fences this writer again")
        assert server.get_node(NODE)["metadata"]["labels"]["nvidia.com/gpu.count"] == "4"


def test_without_periodic_checks_a_deleted_binding_goes_unnoticed(tmp_path: Path) -> None:
    """--admission-check-interval 0: checked at start and after a long outage only (as before)."""
    with FakeApiServer() as server:
        server.add_node(NODE)
        port = free_port()
        settings = {
            "require_admission_policy": True,
            "admission_check_interval": 0.0,
            "metrics_address": f"127.0.0.1:{port}",
        }
        with Writer(server, tmp_path, **settings) as w:
            w.write("nvidia.com/gpu.count=2\n")
            # The label first: by then /readyz listens (asked earlier, it may not yet, and urlopen raises).
            assert eventually(lambda: ours(server) == WANT and _readyz(port)[0] == 200)
            server.admission.bindings = []
            w.write("nvidia.com/gpu.count=3\n")
            assert eventually(lambda: ours(server) == {"nvidia.com/gpu.count": "3"})
            assert _readyz(port)[0] == 200 and w.metric(ENFORCED) == 1


def MIDDLE() -> float:
    """The jitter's middle: the period itself."""
    return 0.5


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_check_that_cannot_be_made_keeps_the_last_verdict_and_is_due_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "nfd_lite"), FakeApiServer() as server:
        server.add_node(NODE)
        clock, gauge = Clock(), Gauge("g", "g", registry=Registry())
        check = AdmissionCheck(
            node_api(server, tmp_path), WriterSettings(NODE, []).policy, 60.0, gauge, clock, MIDDLE
        )
        assert check.next_check() is None  # nothing is periodic before the first check has passed
        check.run_when_due()
        assert check.next_check() == 1060.0 and check.missing is None
        server.admission.bindings = []
        clock.now += 59
        check.run_when_due()  # not due: nothing is asked
        assert check.missing is None
        clock.now += 1
        check.run_when_due()
        assert check.missing is not None and check.next_check() == 1120.0
        server.inject(method="GET", path=f"/api/v1/nodes/{NODE}", status=503, count=1)
        clock.now += 60
        with pytest.raises(ApiError):
            check.run_when_due()
        check.retry_in(30)  # what the sync pass does with it
        assert check.missing is not None and check.next_check() == 1150.0
    # A one-node cluster: the probe of other Nodes is skipped at every check, and said so once.
    assert len(_said(caplog, "writes to other Nodes is not checked")) == 1


def test_the_fleet_shares_the_checks_each_writer_at_a_random_point_of_its_share(tmp_path: Path) -> None:
    """Twelve Nodes: each writer checks about every 12 intervals (the fleet about once per interval), at a
    random point between half and one and a half of that, so that writers started together spread out;
    after a failed check, every interval, until one passes; never less often than daily."""
    with FakeApiServer() as server:
        for n in range(12):
            server.add_node(f"gpu-{n + 1}")
        clock, gauge = Clock(), Gauge("g", "g", registry=Registry())
        policy = WriterSettings(NODE, []).policy
        draws = iter([0.0, 0.999, 0.5, 0.5])
        check = AdmissionCheck(node_api(server, tmp_path), policy, 60.0, gauge, clock, lambda: next(draws))
        check.run_when_due()
        assert check.nodes == 12 and check.period() == 720.0
        assert check.next_check() == 1000.0 + 360.0  # the earliest point: half of 12 intervals
        clock.now = 1360.0
        check.run_when_due()
        assert check.next_check() == pytest.approx(1360.0 + 720.0 * 1.499)  # the latest
        bindings, server.admission.bindings = server.admission.bindings, []
        clock.now = 3000.0
        check.run_when_due()
        assert check.missing is not None and check.period() == 60.0 and check.next_check() == 3060.0
        server.admission.bindings = bindings
        clock.now = 3060.0
        check.run_when_due()
        assert check.missing is None and check.next_check() == 3060.0 + 720.0
        big = AdmissionCheck(node_api(server, tmp_path), policy, 300.0, gauge, clock, MIDDLE)
        big.nodes = 5000
        assert big.period() == 86400.0  # a writer of a 5,000-Node fleet: daily, not every 17 days
