"""End to end under faults: every one ends in the right labels, nothing lost, nothing extra written."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import pytest

from nfd_lite.api.connection import Connection
from nfd_lite.api.incluster import TokenFile
from nfd_lite.service import Service
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, OTHER_NODE, Writer, connection_to, eventually, ours, owned

PATCH_PATH = f"/api/v1/nodes/{NODE}"
WANT = {"nvidia.com/gpu.count": "2"}


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    apiserver.add_node(OTHER_NODE)
    return apiserver


def running(w: Writer, cluster: FakeApiServer) -> None:
    assert eventually(lambda: w.service.synced and cluster.open_watches == 1)


@pytest.mark.parametrize("status", [500, 503, 504])
def test_server_errors_are_retried(cluster: FakeApiServer, tmp_path: Path, status: int) -> None:
    with Writer(cluster, tmp_path) as w:
        running(w, cluster)
        fault = cluster.inject(method="PATCH", path=PATCH_PATH, status=status, count=3)
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert fault.hits == 3
        assert w.metric("nfd_lite_api_errors_total", code=str(status)) == 3
        assert eventually(lambda: w.metric("nfd_lite_writes_total") == 1)


def test_connection_resets_are_retried(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        running(w, cluster)
        cluster.inject(method="PATCH", path=PATCH_PATH, reset=True, count=2)
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert w.metric("nfd_lite_api_errors_total", code="connection") == 2


def test_timeouts_are_retried(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path, request_timeout=0.5) as w:
        running(w, cluster)
        cluster.inject(method="PATCH", path=PATCH_PATH, delay=2.0, reset=True, count=1)
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert w.metric("nfd_lite_api_errors_total", code="connection") >= 1


def test_429_waits_for_retry_after(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        running(w, cluster)
        cluster.inject(method="PATCH", path=PATCH_PATH, status=429, retry_after=1, count=1)
        started = time.monotonic()
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert time.monotonic() - started >= 1.0  # not before the server said it may be retried
        assert w.metric("nfd_lite_api_errors_total", code="429") == 1


def test_409_conflict_rereads_and_retries(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        running(w, cluster)
        gets = cluster.count("GET", PATCH_PATH)
        cluster.inject(method="PATCH", path=PATCH_PATH, status=409, count=1)
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert cluster.count("GET", PATCH_PATH) == gets + 1


def test_a_real_stale_resource_version_is_resolved(cluster: FakeApiServer, tmp_path: Path) -> None:
    # Someone else changes the Node while our PATCH is on its way: the server answers 409 on its own.
    with Writer(cluster, tmp_path) as w:
        running(w, cluster)
        cluster.inject(method="GET", watch=True, delay=30.0, count=None)  # the next watch stalls...
        cluster.drop_watches()  # ...so the writer's view is stale from here on
        assert eventually(lambda: cluster.open_watches == 1)
        cluster.set_node_labels(NODE, {"team.example.com/x": "1"})
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert cluster.labels(NODE)["team.example.com/x"] == "1"
        assert w.metric("nfd_lite_api_errors_total", code="409") >= 1
        cluster.clear_faults()


def test_a_dropped_watch_is_resumed_and_drift_still_repaired(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        running(w, cluster)
        lists = cluster.count("GET", "/api/v1/nodes") - cluster.open_watches
        cluster.drop_watches()
        assert eventually(lambda: cluster.open_watches == 1)
        cluster.set_node_labels(NODE, {"nvidia.com/gpu.count": "0"})
        assert eventually(lambda: ours(cluster) == WANT)
        watches = [r for r in cluster.requests if r.query.get("watch") == "true"]
        assert len(watches) == 2 and watches[1].query["resourceVersion"] != "0"
        assert cluster.count("GET", "/api/v1/nodes") - len(watches) == lists  # resumed, not re-listed


def test_an_expired_watch_410_relists(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        running(w, cluster)
        cluster.inject(method="GET", watch=True, gone=True, count=1)
        cluster.drop_watches()

        def lists() -> int:
            return len([r for r in cluster.requests if r.path == "/api/v1/nodes" and "watch" not in r.query])

        assert eventually(lambda: lists() == 2 and cluster.open_watches == 1)
        cluster.set_node_labels(NODE, {"nvidia.com/gpu.count": None})
        assert eventually(lambda: ours(cluster) == WANT)


@pytest.mark.parametrize("expired", [False, True], ids=["resumed", "relisted"])
def test_drift_while_the_watch_is_down_is_repaired_when_it_is_back(
    cluster: FakeApiServer, tmp_path: Path, expired: bool
) -> None:
    """An administrator's edit that lands between a watch ending and the next one starting is not lost:
    the next watch resumes from the last resourceVersion seen (and is sent the edit), or, when that version
    has expired (410), the Node is listed again with the edit in it. There is no resync to fall back on."""
    with Writer(cluster, tmp_path, resync_interval=3600) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        running(w, cluster)
        # The next watch starts late (and, if expired, is answered 410 Gone).
        cluster.inject(method="GET", watch=True, delay=1.0, gone=expired, count=1)
        cluster.drop_watches()
        assert eventually(lambda: cluster.open_watches == 0)
        cluster.set_node_labels(NODE, {"nvidia.com/gpu.count": None})  # while no watch is open
        assert eventually(lambda: ours(cluster) == WANT)
        # The server shows the label before the writer has read its answer and counted the write.
        assert eventually(lambda: w.metric("nfd_lite_writes_total") == 2)
        lists = [r for r in cluster.requests if r.path == "/api/v1/nodes" and "watch" not in r.query]
        assert len([r for r in lists if "limit" not in r.query]) == 1 + expired  # the self-check's has one


def test_watch_errors_are_retried(cluster: FakeApiServer, tmp_path: Path) -> None:
    cluster.inject(method="GET", path="/api/v1/nodes", status=500, count=2)
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert w.metric("nfd_lite_api_errors_total", code="500") == 2


def test_forbidden_by_rbac_names_the_permission_and_keeps_trying(
    cluster: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = cluster.token_for_service_account("default", "stranger", node_name=NODE)
    with (
        caplog.at_level(logging.ERROR, "nfd_lite"),
        Writer(cluster, tmp_path, connection=connection_to(cluster, tmp_path, token=stranger)) as w,
    ):
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: w.metric("nfd_lite_api_errors_total", code="403") >= 2)
        assert w.thread.is_alive()
    lines = [r.getMessage() for r in caplog.records if "403" in r.getMessage()]
    assert len(lines) == 1  # one clear message, not one per retry
    assert "'list' on core 'nodes'" in lines[0] and "gpu-labeller-nfd-lite" in lines[0]
    assert ours(cluster) == {}


def _with_credentials(connection: Connection, credentials: TokenFile) -> Connection:
    """The same server and TLS as ``connection``, authenticated by ``credentials``."""
    return dataclasses.replace(connection, credentials=credentials)


def test_a_rotated_token_is_picked_up(cluster: FakeApiServer, tmp_path: Path) -> None:
    token_path = tmp_path / "token"
    first = cluster.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
    token_path.write_text(first)
    token = TokenFile(token_path)
    token.read()
    config = _with_credentials(connection_to(cluster, tmp_path, token=first), token)
    with Writer(cluster, tmp_path, connection=config) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == WANT)
        second = cluster.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
        (tmp_path / ".token").write_text(second)
        (tmp_path / ".token").rename(token_path)  # as the kubelet does: an atomic swap
        cluster.revoke_token(first)
        w.write("nvidia.com/gpu.count=4\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "4"})
        assert w.metric("nfd_lite_api_errors_total", code="401") == 0


def test_a_401_makes_it_reread_the_token_file(cluster: FakeApiServer, tmp_path: Path) -> None:
    token_path = tmp_path / "token"
    first = cluster.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
    token_path.write_text(first)
    token = TokenFile(token_path)
    token.read()
    config = _with_credentials(connection_to(cluster, tmp_path, token=first), token)
    service = Service(Writer(cluster, tmp_path, connection=config).service.settings, config)
    second = cluster.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE)
    # Rewritten in place with its times kept: nothing a stat sees changes, so only the 401 can tell.
    assert len(second) == len(first)
    before = token_path.stat()
    token_path.write_text(second)
    os.utime(token_path, ns=(before.st_atime_ns, before.st_mtime_ns))
    cluster.revoke_token(first)
    (tmp_path / "features.d" / "gfd").write_text("nvidia.com/gpu.count=2\n")
    service.oneshot()
    assert ours(cluster) == WANT
    assert owned(cluster) == "nvidia.com/gpu.count"


REFUSED = "nvidia.com/gpu.refused"
DENIED = (
    f"nodes \"{NODE}\" is forbidden: ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding "
    "'gpu-labeller-nfd-lite' denied request: nfd-lite may only change labels under nvidia.com/, "
    f"not: {REFUSED}"
)


def test_labels_the_policy_refuses_are_held_back_and_the_rest_written(
    cluster: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal naming one label of a change holds just that label back: the rest is written in the same
    pass, the refusal is said once, and the label is tried again after the slow-retry interval."""
    with caplog.at_level(logging.INFO, "nfd_lite"), Writer(cluster, tmp_path, slow_retry=1.0) as w:
        running(w, cluster)
        fault = cluster.inject(method="PATCH", path=PATCH_PATH, status=403, message=DENIED, count=1)
        w.write(f"nvidia.com/gpu.count=2\n{REFUSED}=1\n")
        assert eventually(lambda: ours(cluster) == WANT)
        assert fault.hits == 1 and REFUSED not in (owned(cluster) or "")
        # Counted once the pass has read its PATCH answer, after the server shows the labels.
        assert eventually(lambda: w.metric("nfd_lite_refused_labels") == 1)
        w.write(f"nvidia.com/gpu.count=4\n{REFUSED}=1\n")  # not frozen: later changes go through
        assert eventually(lambda: ours(cluster).get("nvidia.com/gpu.count") == "4")
        # The fault is spent: tried again after the interval, the label is admitted.
        assert eventually(lambda: ours(cluster).get(REFUSED) == "1", timeout=10)
        assert eventually(lambda: w.metric("nfd_lite_refused_labels") == 0)
    said = [r.getMessage() for r in caplog.records if "admission policy refused" in r.getMessage()]
    assert len(said) == 1 and f"refused 1 ({REFUSED})" in said[0], said
    assert any("admits every label" in r.getMessage() for r in caplog.records)
