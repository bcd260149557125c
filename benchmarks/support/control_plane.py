"""A real control plane of the benchmark's own (tests/kube: etcd, kube-apiserver, the controller that
type-checks policies), for the pieces whose figures are the server's own (policy-cost, fleet-view)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.kube.controlplane import ControlPlane


@contextmanager
def control_plane(prefix: str) -> Iterator[ControlPlane]:
    """A control plane of its own: nothing else (no NFD, no writers) spends the server's CPU. Its logs are
    kept (and said where) if the run fails."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with ControlPlane(tmp / "kube") as kube:
            yield kube
    except BaseException:
        print(f"logs kept in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
