"""Shared pytest set-up: the real control plane (tests/kube), the real one-node cluster (tests/node), the
project image built once per session (tests/image_build.py) and the fault-injecting fake API server
(tests/apiserver) register their fixtures here."""

import signal
from types import FrameType

import pytest

pytest_plugins = [
    "tests.apiserver.fixtures",
    "tests.kube.fixtures",
    "tests.node.fixtures",
    "tests.image_build",
]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI job cancelled, ``timeout``) ends the run as Ctrl-C does: every fixture tears down what it
    started, so no API server, node or writer is left behind."""
    signal.signal(signal.SIGTERM, _interrupt)
