"""Lost API access is never silent: once the API server has not answered for the bound (refused, timed
out, a watch gone quiet: what a stale NetworkPolicy looks like), /readyz fails, a metric says so and one
log line names the likely cause, once per outage; the first answer ends it. The writer against the
fault-injecting API server cut off and restored (Outage alone, with a clock of the test's own:
tests/nfd_lite/api/test_outage.py)."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nfd_lite.settings import WriterSettings
from tests.apiserver.server import FakeApiServer
from tests.kube.controlplane import free_port
from tests.nfd_lite.harness import NODE, Writer, eventually, ours

CAUSE = "networkPolicy.apiServerEgress"


def unreachable_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot reach the API server" in r.getMessage()]


def test_the_bound_is_above_a_quiet_watchs_silence_and_a_request() -> None:
    # A healthy watch the server keeps quiet is cut at watch_silence and opened again at once: that must
    # never read as an outage, so the bound leaves room for the new request (its timeout is 10 s).
    settings = WriterSettings("n", [])
    assert settings.api_unreachable_after >= settings.watch_silence + 10
    assert settings.watch_silence > 60  # the API server's bookmark period on a quiet watch


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("cut", ["silent", "reset"])
def test_the_writer_cut_off_from_the_api_server_says_so_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: str
) -> None:
    """silent: the open watch stops bringing even bookmarks and every new request hangs (a policy that
    drops packets); reset: connections are torn down (one that rejects them)."""
    with FakeApiServer(bookmark_interval=0.1) as server:
        server.add_node(NODE)
        port = free_port()
        settings = {"watch_silence": 0.5, "api_unreachable_after": 1.5, "request_timeout": 0.5}
        settings |= {"metrics_address": f"127.0.0.1:{port}"}
        with caplog.at_level(logging.INFO, "nfd_lite"), Writer(server, tmp_path, **settings) as w:
            w.write("nvidia.com/gpu.count=2\n")
            assert eventually(lambda: ours(server) == {"nvidia.com/gpu.count": "2"} and _readyz(port) == 200)
            # Quiet but healthy: bookmarks keep coming, the watch stays open, nothing is said.
            watches = server.count(path="/api/v1/nodes")
            assert not eventually(lambda: _readyz(port) != 200, timeout=2.0, interval=0.05)
            assert server.count(path="/api/v1/nodes") == watches
            assert w.metric("nfd_lite_api_unreachable") == 0

            if cut == "silent":
                server.bookmark_interval = 3600.0
                server.inject(delay=5.0, count=None)
            else:
                server.inject(reset=True, count=None)
                server.drop_watches(reset=True)

            def rewritten_and_unready() -> bool:
                # gfd rewrites its file on every probe: each pass, with nothing to send, is no answer.
                w.write("nvidia.com/gpu.count=2\n")
                return _readyz(port) == 503

            assert eventually(rewritten_and_unready, timeout=10, interval=0.05)
            assert w.metric("nfd_lite_api_unreachable") == 1
            assert w.metric("nfd_lite_api_unreachable_seconds") >= 1.5
            assert w.metric("nfd_lite_api_errors_total", code="connection") >= 1
            assert w.service.healthy(), "the outage is no reason to restart the container"
            assert not eventually(lambda: _readyz(port) == 200, timeout=2.0, interval=0.05)  # it lasts...
            assert len(unreachable_lines(caplog)) == 1  # ...and is said once

            server.clear_faults()
            server.bookmark_interval = 0.1
            assert eventually(lambda: _readyz(port) == 200, timeout=15, interval=0.05)
            assert w.metric("nfd_lite_api_unreachable") == 0
            assert any(m.startswith("the API server answers again") for m in caplog.messages)
            # And it writes again.
            w.write("nvidia.com/gpu.count=4\n")
            assert eventually(lambda: ours(server) == {"nvidia.com/gpu.count": "4"})
    (line,) = unreachable_lines(caplog)
    assert CAUSE in line and "networkPolicy.apiServerCIDRs" in line


@pytest.mark.parametrize("status", [503, 403])
def test_http_errors_are_answers_not_an_outage(tmp_path: Path, status: int) -> None:
    """A server that answers, even with errors only, is reachable: its failures are reported as what they
    are, never as a lost network."""
    with FakeApiServer() as server:
        server.add_node(NODE)
        settings = {"watch_silence": 0.5, "api_unreachable_after": 1.5, "request_timeout": 0.5}
        with Writer(server, tmp_path, **settings) as w:
            w.write("nvidia.com/gpu.count=2\n")
            assert eventually(lambda: ours(server) == {"nvidia.com/gpu.count": "2"} and w.service.ready())
            server.inject(status=status, count=None)
            server.drop_watches()
            assert eventually(lambda: w.metric("nfd_lite_api_errors_total", code=str(status)) >= 3)
            assert not eventually(lambda: not w.service.ready(), timeout=3.0, interval=0.1)
            assert w.metric("nfd_lite_api_unreachable") == 0
