"""End to end: real files, real inotify, the real kubernetes client over HTTP, the fake API server
evaluating the project's RBAC and admission policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nfd_lite.reconciler import OWNED_ANNOTATION
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.writer import NODE, OTHER_NODE, Writer, eventually, ours, owned

THEIRS = {"kubernetes.io/hostname": NODE, "team.example.com/owner": "ml"}


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node(NODE, labels=dict(THEIRS))
    apiserver.add_node(OTHER_NODE, labels={"kubernetes.io/hostname": OTHER_NODE, "nvidia.com/gpu.count": "9"})
    return apiserver


def test_labels_appear_change_and_are_removed(cluster: FakeApiServer, tmp_path: Path) -> None:
    other_before = cluster.get_node(OTHER_NODE)
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.count=2\ngpu.present\n")
        assert eventually(
            lambda: (
                ours(cluster)
                == {"nvidia.com/gpu.count": "2", "feature.node.kubernetes.io/gpu.present": "true"}
            )
        )
        assert owned(cluster) == "feature.node.kubernetes.io/gpu.present,nvidia.com/gpu.count"
        w.write("nvidia.com/gpu.count=4\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "4"})
        assert owned(cluster) == "nvidia.com/gpu.count"
        (w.dir / "gfd").unlink()
        assert eventually(lambda: ours(cluster) == {})
        assert eventually(lambda: owned(cluster) is None)
    labels = cluster.labels(NODE)
    assert {k: labels[k] for k in THEIRS} == THEIRS
    assert cluster.get_node(OTHER_NODE) == other_before
    assert all(r.path in ("/api/v1/nodes", f"/api/v1/nodes/{NODE}") for r in cluster.requests)
    assert all(
        r.query.get("fieldSelector") == f"metadata.name={NODE}"
        for r in cluster.requests
        if r.path == "/api/v1/nodes"
    )


def test_labels_expire_at_their_time_without_a_file_change(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        assert eventually(lambda: w.service.synced)
        soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat(timespec="milliseconds")
        w.write(f"nvidia.com/keep=1\n# +expiry-time={soon}\nnvidia.com/lease=1\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/keep": "1", "nvidia.com/lease": "1"})
        assert eventually(lambda: ours(cluster) == {"nvidia.com/keep": "1"})
        assert owned(cluster) == "nvidia.com/keep"


def test_bad_input_never_reaches_the_api(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        (w.dir / "binary").write_bytes(b"nvidia.com/bin=1\n\0")
        w.write(
            "\n".join(
                [
                    "kubernetes.io/hostname=evil",
                    "node-role.kubernetes.io/control-plane=",
                    "example.com/not-allowed=1",
                    "nvidia.com/bad=has space",
                    "nvidia.com/ok=1",
                ]
            )
            + "\n"
        )
        assert eventually(lambda: ours(cluster) == {"nvidia.com/ok": "1"})
        assert cluster.labels(NODE)["kubernetes.io/hostname"] == NODE
        assert "node-role.kubernetes.io/control-plane" not in cluster.labels(NODE)
        assert w.metric("nfd_lite_rejected_lines_total", reason="reserved-namespace") == 2
        assert w.metric("nfd_lite_rejected_lines_total", reason="not-allowed") == 1
        assert w.metric("nfd_lite_rejected_lines_total", reason="invalid-value") == 1
        assert w.metric("nfd_lite_rejected_lines_total", reason="binary") == 1


def test_a_label_someone_else_set_is_a_conflict_left_alone(cluster: FakeApiServer, tmp_path: Path) -> None:
    cluster.set_node_labels(NODE, {"nvidia.com/gpu.product": "theirs"})
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.product=ours\nnvidia.com/gpu.count=1\n")
        assert eventually(lambda: owned(cluster) == "nvidia.com/gpu.count")
        assert cluster.labels(NODE)["nvidia.com/gpu.product"] == "theirs"
        assert w.metric("nfd_lite_conflicts_total") == 1


def test_overwrite_takes_a_conflicting_label(cluster: FakeApiServer, tmp_path: Path) -> None:
    cluster.set_node_labels(NODE, {"nvidia.com/gpu.product": "theirs"})
    with Writer(cluster, tmp_path, overwrite=True) as w:
        w.write("nvidia.com/gpu.product=ours\n")
        assert eventually(lambda: cluster.labels(NODE)["nvidia.com/gpu.product"] == "ours")
        assert owned(cluster) == "nvidia.com/gpu.product"


def test_owned_drift_is_repaired_foreign_edits_ignored(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.count=2\nnvidia.com/mig=off\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2", "nvidia.com/mig": "off"})
        cluster.set_node_labels(NODE, {"nvidia.com/gpu.count": "99", "nvidia.com/mig": None})
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2", "nvidia.com/mig": "off"})
        patches = cluster.count("PATCH")
        cluster.set_node_labels(NODE, {"team.example.com/owner": "infra"})
        w.settle()
        assert cluster.count("PATCH") == patches


def test_steady_state_makes_no_writes_and_no_reads(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path, resync_interval=1.0) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2"})
        assert eventually(lambda: w.service.synced and cluster.open_watches == 1)
        before = list(cluster.requests)
        w.write("nvidia.com/gpu.count=2\n")  # same content again
        w.settle()
        cluster.send_bookmarks()
        w.settle()  # the periodic rescan
        assert cluster.requests == before


def test_start_up_keeps_owned_labels_until_files_are_seen(cluster: FakeApiServer, tmp_path: Path) -> None:
    meta = {"labels": {"nvidia.com/old": "1"}, "annotations": {OWNED_ANNOTATION: "nvidia.com/old"}}
    cluster.patch_node(NODE, {"metadata": meta})
    with Writer(cluster, tmp_path, startup_grace=3600.0) as w:
        assert eventually(lambda: w.service.synced)
        assert ours(cluster) == {"nvidia.com/old": "1"}
        w.write("nvidia.com/new=1\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/new": "1"})


def test_stopping_leaves_labels_in_place(cluster: FakeApiServer, tmp_path: Path) -> None:
    with Writer(cluster, tmp_path) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/gpu.count": "2"})
        patches = cluster.count("PATCH")
    assert ours(cluster) == {"nvidia.com/gpu.count": "2"}
    assert cluster.count("PATCH") == patches


def test_a_feature_directory_created_late_is_picked_up(cluster: FakeApiServer, tmp_path: Path) -> None:
    late = tmp_path / "late.d"
    with Writer(cluster, tmp_path, directory=late) as w:
        assert eventually(lambda: w.service.synced)
        late.mkdir()
        (late / "x").write_text("nvidia.com/late=1\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/late": "1"})
        replaced = tmp_path / "late.d.old"
        late.rename(replaced)
        late.mkdir()
        (late / "x").write_text("nvidia.com/late=2\n")
        assert eventually(lambda: ours(cluster) == {"nvidia.com/late": "2"})
