"""The main loop's schedule (nfd_lite/node/loop.py), run on the writer's parts against the fake API server,
with real inotify and the Node handed in as the watch would: when it runs a pass, and when it reads the
files again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nfd_lite.files.watcher import DirWatcher
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, Parts, eventually, ours, parts, write_atomic

NODE_PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    return apiserver


@contextmanager
def running(p: Parts) -> Iterator[None]:
    """The writer's main loop on its own thread, watching the features directory, until the block ends."""
    watcher = DirWatcher(p.settings.directories, p.inbox.files_changed)
    watcher.start()
    thread = threading.Thread(target=p.service.loop.run, args=(watcher,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        p.service.stop()
        thread.join(10)
        watcher.stop()
    assert not thread.is_alive(), "the loop did not stop"


def test_passes_wait_for_the_watched_node_and_its_own_write_asks_for_no_other(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    write_atomic(p.settings.directories[0], "gfd", "nvidia.com/gpu.count=2\n")
    with running(p):
        assert eventually(lambda: p.features.labels() == {"nvidia.com/gpu.count": "2"})
        time.sleep(0.2)
        assert p.metric("nfd_lite_syncs_total") == 0  # the watch has not listed the Node yet
        p.inbox.node_seen(cluster.get_node(NODE))
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2"})
        # The pass is counted once its PATCH answer is read, after the server shows the label; then no
        # second pass follows from that answer.
        assert eventually(lambda: p.metric("nfd_lite_syncs_total") == 1)
        time.sleep(0.2)
        assert p.metric("nfd_lite_syncs_total") == 1
    assert cluster.count("GET", NODE_PATH) == 0  # the daemon plans against what the watch delivered


def test_a_node_change_the_watch_delivers_is_a_pass_that_repairs_drift(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    p = parts(cluster, tmp_path)
    write_atomic(p.settings.directories[0], "gfd", "nvidia.com/gpu.count=2\n")
    p.inbox.node_seen(cluster.get_node(NODE))
    with running(p):
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2"})
        p.inbox.node_seen(cluster.set_node_labels(NODE, {"nvidia.com/gpu.count": "9"}))
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2"})
        # The server shows the label before the writer has read its answer and counted the write.
        assert eventually(lambda: p.metric("nfd_lite_writes_total") == 2)


def test_the_files_are_read_again_when_a_label_expires(cluster: FakeApiServer, tmp_path: Path) -> None:
    p = parts(cluster, tmp_path)
    directory = p.settings.directories[0]
    soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    write_atomic(directory, "a", "nvidia.com/gpu.lease=a\n")
    write_atomic(directory, "b", f"# +expiry-time={soon}\nnvidia.com/gpu.lease=b\n")
    p.inbox.node_seen(cluster.get_node(NODE))
    with running(p):
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.lease": "b"})
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.lease": "a"})  # no event, no resync
        assert [e.key for e in p.features.expired] == ["nvidia.com/gpu.lease"]
