"""Pytest fixtures for the real one-node cluster (registered in tests/conftest.py).

One node serves the whole session: it starts when the first test asks for it (about 15-20 s) and is swept
when the session ends, also after a failure or a Ctrl-C; SIGTERM is turned into the same orderly end. A run
killed outright leaves its node to the next run, which sweeps it before starting its own."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.node import images
from tests.node.cluster import NodeCluster, what_is_missing, why_not_runnable


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def real_node() -> Iterator[NodeCluster]:
    if reason := why_not_runnable():
        pytest.skip(reason)
    if missing := what_is_missing():
        pytest.fail(missing, pytrace=False)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with NodeCluster() as cluster:
            yield cluster
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def node_with_image(real_node: NodeCluster, project_image: subprocess.CompletedProcess[str]) -> NodeCluster:
    """The node with the project image (scripts/build-image.sh, this checkout) in its containerd."""
    assert project_image.returncode == 0, f"scripts/build-image.sh failed:\n{project_image.stderr[-3000:]}"
    archive = images.export_project_image(real_node.workdir / "images" / "gpu-labeller.tar")
    real_node.import_image(archive)
    archive.unlink()
    return real_node


@pytest.fixture(scope="session")
def gpu_node(node_with_image: NodeCluster) -> NodeCluster:
    """The node with the project image and NVIDIA's device plugin image."""
    if not images.DEVICE_PLUGIN.exists():
        pytest.fail(f"{images.DEVICE_PLUGIN} is missing: run scripts/install-tools.sh", pytrace=False)
    made = Path(node_with_image.workdir) / "images"
    node_with_image.import_image(
        images.write_archive(images.device_plugin_image(), made / "device-plugin.tar")
    )
    return node_with_image
