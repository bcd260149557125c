"""nfd-lite as it runs in a pod: its own process, the pod-bound token, CA and namespace at the in-cluster
path /var/run/secrets/kubernetes.io/serviceaccount (bind-mounted in a private mount namespace, so the test
machine's own /run is untouched), and KUBERNETES_SERVICE_HOST/PORT pointing at the real control plane."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from nfd_lite.api.kubeconfig import kubeconfig_connection
from tests.kube.controlplane import ControlPlane
from tests.kube.process import LoggedProcess
from tests.service_thread import ServiceThread
from tests.waiting import eventually, write_atomic

__all__ = ["PodWriter", "ThreadWriter", "eventually", "in_pod", "write_atomic"]

WRITER_USER = "system:serviceaccount:gpu-labeller:nfd-lite"

IN_CLUSTER_DIR = "/run/secrets/kubernetes.io/serviceaccount"


def in_pod(
    kube: ControlPlane, workdir: Path, node: str, args: list[str], token: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``python -m nfd_lite ARGS`` as the pod would."""
    sa_dir, env = kube.in_cluster(workdir / "serviceaccount", token or kube.pod_token(node))
    inner = " && ".join(
        [
            "mount -t tmpfs tmpfs /run",
            f"mkdir -p {IN_CLUSTER_DIR}",
            f"mount --bind {shlex.quote(str(sa_dir))} {IN_CLUSTER_DIR}",
            "exec " + shlex.join([sys.executable, "-m", "nfd_lite", "--node-name", node, *args]),
        ]
    )
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
    return command, {**os.environ, **env, "PYTHONUNBUFFERED": "1"}


class PodWriter(LoggedProcess):
    """``with PodWriter(kube, tmp_path, node) as w:`` runs the writer until the block ends (SIGTERM)."""

    def __init__(
        self, kube: ControlPlane, workdir: Path, node: str, *extra: str, token: str | None = None
    ) -> None:
        self.dir = workdir / "features.d"
        self.dir.mkdir(exist_ok=True)
        args = ["--features-dir", str(self.dir), "--metrics-address", "", "--startup-grace", "0", *extra]
        command, env = in_pod(kube, workdir, node, args, token)
        super().__init__("nfd-lite", command, env, workdir / f"nfd-lite-{node}.log")

    def __enter__(self) -> PodWriter:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(15)

    def write(self, text: str, name: str = "gfd") -> None:
        write_atomic(self.dir, name, text)


class ThreadWriter(ServiceThread):
    """The writer's Service in a thread of the test process, with a kubeconfig holding the pod-bound
    token, for tests that look inside it (metrics, sync passes) while it talks to the real server."""

    def __init__(
        self, kube: ControlPlane, workdir: Path, node: str, *, token: str | None = None, **settings: Any
    ) -> None:
        self.kube = kube
        self.node = node
        directory = settings.pop("directory", None)
        features: Path = directory or workdir / "features.d"
        if directory is None:
            features.mkdir(exist_ok=True)
        self.token = token or kube.pod_token(node)
        config = kubeconfig_connection(kube.kubeconfig(workdir / f"kubeconfig-{node}", self.token))
        super().__init__(config, node, features, **settings)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            super().__exit__(kind, exc, tb)
        finally:
            self.api.close()

    def requests(self) -> list[dict[str, Any]]:
        """This writer's requests as the server's audit log has them."""
        return [
            event
            for event in self.kube.requests(WRITER_USER)
            if f"/nodes/{self.node}" in event["requestURI"]
            or f"metadata.name%3D{self.node}" in event["requestURI"]
        ]
