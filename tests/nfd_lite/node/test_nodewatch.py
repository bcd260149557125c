"""The own-Node watch (nfd_lite/node/nodewatch.py) as the alerts see it: every Node it delivers, event or
bookmark moves nfd_lite_node_seen_timestamp_seconds, which NodeWatchSilent reads; a watch that hears
nothing leaves it where it was. (Resuming, relisting after 410 Gone and dropped watches are proven end to
end in tests/nfd_lite/test_e2e_faults.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, Writer
from tests.waiting import eventually

SEEN = "nfd_lite_node_seen_timestamp_seconds"


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.bookmark_interval = 3600.0  # bookmarks only when the test sends them
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    return apiserver


def test_the_node_seen_time_moves_with_each_event_and_bookmark_only(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    started = time.time()
    with Writer(cluster, tmp_path) as w:
        assert eventually(lambda: w.service.synced and cluster.open_watches == 1)
        listed = w.metric(SEEN)
        assert listed >= started  # the list the watch starts from
        time.sleep(1.1)
        assert w.metric(SEEN) == listed  # nothing heard, nothing moved
        cluster.send_bookmarks()
        assert eventually(lambda: w.metric(SEEN) > listed)
        bookmarked = w.metric(SEEN)
        time.sleep(1.1)
        cluster.set_node_labels(NODE, {"team.example.com/owner": "ml"})
        assert eventually(lambda: w.metric(SEEN) > bookmarked)
