"""The running writer against a hostile feature directory: logs stay one line per event and are not
repeated on rescans, caps are exported as metrics, control labels never reach the Node."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from nfd_lite.files.limits import Limits
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from nfd_lite.service import Service
from nfd_lite.settings import WriterSettings
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, Writer, connection_to, eventually, ours, write_atomic


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE, "nvidia.com/mig.config": "all-1g.5gb"})
    return apiserver


def test_warnings_are_logged_once_per_change_escaped_and_without_content(
    cluster: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "x\nnfd-lite: INFO: patched node gpu-1"
    with caplog.at_level(logging.INFO, "nfd_lite"), Writer(cluster, tmp_path, resync_interval=1.0) as w:
        write_atomic(w.dir, "a", "nvidia.com/gpu.count=2\n")
        write_atomic(w.dir, "b", "nvidia.com/gpu.count=4\nnvidia.com/gpu.product=has SECRET space\n")
        write_atomic(w.dir, forged, "nvidia.com/gpu.deploy.driver=false\n")
        assert eventually(lambda: ours(cluster).get("nvidia.com/gpu.count") == "4")
        write_atomic(w.dir, "a", "nvidia.com/gpu.count=2\n\0")  # turns bad: its last good content stays
        for _ in range(3):  # periodic rescans find the same files: nothing new to say
            w.settle()
        assert eventually(lambda: w.syncs() > 3)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("overrides nvidia.com/gpu.count" in m for m in messages) == 1
    assert sum("invalid-value" in m for m in messages) == 1
    assert sum("keeping its last good content" in m for m in messages) == 1
    (control,) = [m for m in messages if "control-label" in m]
    assert "x\\nnfd-lite: INFO: patched node gpu-1:1 nvidia.com/gpu.deploy.driver" in control
    assert all("\n" not in m and "SECRET" not in m for m in messages)
    assert cluster.labels(NODE)["nvidia.com/mig.config"] == "all-1g.5gb"
    assert "nvidia.com/gpu.deploy.driver" not in cluster.labels(NODE)


def test_caps_are_exported_as_metrics_and_the_node_gets_only_what_fits(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    for i in range(30):
        (features / f"f{i:02d}").write_text(f"nvidia.com/gpu.l{i:02d}=1\n")
    limits = Limits(max_files=20, max_labels=15)
    settings = WriterSettings(
        NODE, [features], limits=limits, startup_grace=0.0, max_backoff=0.5, require_admission_policy=False
    )  # the fake API server enforces no admission policy
    service = Service(settings, connection_to(cluster, tmp_path))
    service.oneshot()
    labels = {k: v for k, v in ours(cluster).items() if k != "nvidia.com/mig.config"}  # not ours
    assert sorted(labels) == [f"nvidia.com/gpu.l{i:02d}" for i in range(15)]
    owned = cluster.get_node(NODE)["metadata"]["annotations"][OWNED_ANNOTATION]
    assert owned == ",".join(sorted(labels))
    sample = service.metrics.registry.get_sample_value
    assert sample("nfd_lite_capped", {"cap": "files"}) == 10
    assert sample("nfd_lite_capped", {"cap": "labels"}) == 5
    assert sample("nfd_lite_capped", {"cap": "bytes"}) == 0
    assert sample("nfd_lite_rejected_lines_total", {"reason": "too-many-files"}) == 1
    assert sample("nfd_lite_rejected_lines_total", {"reason": "too-many-labels"}) == 1


def test_a_flipping_file_is_written_at_the_write_rate_and_ends_in_its_last_content(
    cluster: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file rewritten every few milliseconds: PATCHes stay within the default token bucket (a burst of
    10, then 1 a second) instead of one per change, and the Node still ends with the last content. The
    "patched node" lines name keys, never values."""
    settings = WriterSettings(NODE, [])
    with caplog.at_level(logging.INFO, "nfd_lite"), Writer(cluster, tmp_path) as w:
        assert eventually(lambda: w.service.synced)
        patches = cluster.count("PATCH", f"/api/v1/nodes/{NODE}")
        started = time.monotonic()
        for n in range(600):
            write_atomic(w.dir, "gfd", f"nvidia.com/gpu.count=2\nnvidia.com/gpu.flip=v{n}\n")
            time.sleep(0.003)
        elapsed = time.monotonic() - started
        assert eventually(lambda: ours(cluster).get("nvidia.com/gpu.flip") == "v599")
        written = cluster.count("PATCH", f"/api/v1/nodes/{NODE}") - patches
    # The last content may need one more write after the flipping stopped.
    assert written <= settings.write_burst + settings.write_rate * elapsed + 2, (written, elapsed)
    patched = [r.getMessage() for r in caplog.records if r.getMessage().startswith("patched node")]
    assert patched and not any("v5" in line or "=" in line for line in patched), patched[-3:]
    assert "set 1 (nvidia.com/gpu.flip)" in patched[-1]
