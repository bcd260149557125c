"""Upstream Node Feature Discovery (nfd-master, nfd-worker) on the real control plane, run as its own
deployment runs them: each in a pod-like sandbox with a pod-bound service-account token at the in-cluster
path, NFD's own CRDs and RBAC from the pinned module's deployment/ manifests, and the worker reading its
hard-coded features.d. Built by ``scripts/peers/build.sh nfd`` (see scripts/peers/nfd).

The sandbox is a private mount namespace (``unshare --mount``, root): a tmpfs over /run carries the token,
and /etc is overlaid by a throw-away layer in which features.d is a bind mount of the caller's directory.
The machine's own /etc and /run are never written.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from tests.kube.controlplane import ROOT, ControlPlane, ControlPlaneError, free_port
from tests.kube.process import LoggedProcess

MODULE = "sigs.k8s.io/node-feature-discovery"
PEER = ROOT / "scripts" / "peers" / "nfd"
BINARIES = ROOT / ".cache" / "peers" / "nfd"
BUILD_HINT = "build them with scripts/install-tools.sh (or scripts/peers/build.sh nfd)"
NAMESPACE = "node-feature-discovery"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
IN_CLUSTER_DIR = "/run/secrets/kubernetes.io/serviceaccount"
# The local source alone: the same job nfd-lite does (feature files -> labels), and nothing of this
# machine's own hardware ends up on the simulated Nodes.
WORKER_SOURCES = ("-feature-sources=local", "-label-sources=local")


def module_dir() -> Path:
    """The pinned NFD module in Go's module cache, where the build left it (no network: GOPROXY=off)."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOPROXY": "off"}
    try:
        result = subprocess.run(
            ["go", "list", "-m", "-json", MODULE],
            cwd=PEER,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        raise ControlPlaneError(f"go is not installed, so {MODULE} cannot be found: {BUILD_HINT}") from None
    directory = json.loads(result.stdout or "{}").get("Dir") if result.returncode == 0 else None
    if not directory:
        raise ControlPlaneError(
            f"{MODULE} is not in Go's module cache ({result.stderr.strip()}): {BUILD_HINT}"
        )
    return Path(directory)


def token_pod(token: str) -> tuple[str, str]:
    """The (name, uid) of the Pod a bound token belongs to, from its claims (what the kubelet would put in
    POD_NAME and POD_UID through the downward API)."""
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    pod = claims["kubernetes.io"]["pod"]
    return str(pod["name"]), str(pod["uid"])


def _python_for_any_user() -> list[str]:
    """Mount steps that let a non-root user run this Python when it is installed under /root, which is
    private to root: /root is covered by an empty view that holds only the Python installation."""
    base = Path(sys.base_prefix).resolve()
    if not base.is_relative_to("/root"):
        return []
    where = shlex.quote(str(base))
    return [
        "mkdir -p /run/python",
        f"mount --bind {where} /run/python",
        "mount -t tmpfs -o mode=0755 tmpfs /root",
        f"mkdir -p {where}",
        f"mount --bind /run/python {where}",
    ]


def sandbox_command(
    sa_dir: Path, argv: Sequence[str], features_dir: Path | None = None, uid: int | None = None
) -> list[str]:
    """``argv`` in a private mount namespace with ``sa_dir`` at the in-cluster path and, if given,
    ``features_dir`` at NFD's features.d. ``exec`` keeps the process id: it is the program's own. With
    ``uid`` it runs as that user (and group), as a pod's non-root user: then per-user kernel limits, such
    as the 128 inotify instances of fs.inotify.max_user_instances, are its own and not the machine's
    root's, as on a node of its own."""
    steps = [
        "mount -t tmpfs tmpfs /run",
        f"mkdir -p {IN_CLUSTER_DIR}",
        f"mount --bind {shlex.quote(str(sa_dir))} {IN_CLUSTER_DIR}",
    ]
    if features_dir is not None:
        steps += [
            "mkdir -p /run/etc/upper /run/etc/work",
            "mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/etc/upper,workdir=/run/etc/work /etc",
            f"mkdir -p {FEATURES_D}",
            f"mount --bind {shlex.quote(str(features_dir))} {FEATURES_D}",
        ]
    if uid is not None:
        steps += _python_for_any_user()
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    steps.append("exec " + shlex.join(argv))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", " && ".join(steps)]


class NfdProcess(LoggedProcess):
    """One running nfd-master or nfd-worker, with the port of its /healthz."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path, port: int) -> None:
        super().__init__(name, command, env, log)
        self.port = port

    def healthy(self) -> bool:
        """Its /healthz answers, which both serve once their set-up is done (the master's caches synced)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if not self.running() or time.monotonic() > deadline:
                state = "exited" if not self.running() else f"not healthy in {timeout:.0f} s"
                raise ControlPlaneError(f"{self.name} {state}:\n{self.output()[-3000:]}")
            time.sleep(0.1)


class UpstreamNfd:
    """``with UpstreamNfd(kube, workdir) as nfd:`` installs NFD's CRDs and RBAC (once per server, idempotent)
    and stops every master and worker it started when the block ends."""

    def __init__(self, kube: ControlPlane, workdir: Path, binaries: Path = BINARIES) -> None:
        self.kube = kube
        self.workdir = workdir
        self.binaries = binaries
        self.processes: list[NfdProcess] = []

    def __enter__(self) -> UpstreamNfd:
        for name in ("nfd-master", "nfd-worker"):
            if not os.access(self.binaries / name, os.X_OK):
                raise ControlPlaneError(f"{self.binaries / name} is missing: {BUILD_HINT}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.install()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def install(self) -> None:
        """NFD's own manifests, as its kustomize deployment applies them."""
        base = module_dir() / "deployment" / "base"
        crds = base / "nfd-crds" / "nfd-api-crds.yaml"
        self.kube.kubectl("apply", "--server-side", "--field-manager=nfd-tests", "-f", str(crds))
        self.kube.ensure_namespace(NAMESPACE)
        self.kube.kubectl("apply", "--server-side", "--field-manager=nfd-tests", "-k", str(base / "rbac"))
        names = ("nodefeatures", "nodefeaturerules", "nodefeaturegroups")
        crd_names = [f"crd/{name}.nfd.k8s-sigs.io" for name in names]
        self.kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crd_names)

    def _prepare(
        self,
        name: str,
        account: str,
        node: str,
        argv: list[str],
        features_dir: Path | None = None,
        uid: int | None = None,
    ) -> NfdProcess:
        """The process, its pod-bound token issued and its sandbox laid out, not yet started."""
        token = self.kube.pod_token(node, namespace=NAMESPACE, account=account)
        pod_name, pod_uid = token_pod(token)
        home = self.workdir / pod_name
        sa_dir, env = self.kube.in_cluster(home / "serviceaccount", token)
        (sa_dir / "namespace").write_text(NAMESPACE)
        env = {**os.environ, **env, "NODE_NAME": node, "POD_NAME": pod_name, "POD_UID": pod_uid}
        port = free_port()
        command = sandbox_command(
            sa_dir, [str(self.binaries / name), f"-port={port}", *argv], features_dir, uid
        )
        process = NfdProcess(name, command, env, home / f"{name}.log", port)
        self.processes.append(process)
        return process

    def start_master(self, node: str, *extra: str) -> NfdProcess:
        """nfd-master as its Deployment runs it, on ``node``."""
        return self._prepare("nfd-master", "nfd-master", node, list(extra)).start()

    def prepare_worker(
        self, node: str, features_dir: Path, *extra: str, uid: int | None = None
    ) -> NfdProcess:
        """nfd-worker as its DaemonSet runs it on ``node``, reading ``features_dir`` as its features.d;
        ``start()`` it (many can be prepared first and started at once). ``uid``: see sandbox_command."""
        argv = [*WORKER_SOURCES, *extra]
        return self._prepare("nfd-worker", "nfd-worker", node, argv, features_dir, uid)

    def start_worker(self, node: str, features_dir: Path, *extra: str) -> NfdProcess:
        return self.prepare_worker(node, features_dir, *extra).start()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


# What a kubelet puts on the Node it registers. nfd-master edits labels and annotations with JSON-patch
# "add" operations on keys under /metadata/labels and /metadata/annotations, which the server refuses when
# either map is absent; a Node made by a real kubelet always has both.
KUBELET_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
KUBELET_ANNOTATIONS = {
    "node.alpha.kubernetes.io/ttl": "0",
    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
}


def as_kubelet_registers(kube: ControlPlane, node: str) -> str:
    """Give ``node`` the labels and annotations its kubelet would have set; returns the name."""
    patch = {"metadata": {"labels": KUBELET_LABELS, "annotations": KUBELET_ANNOTATIONS}}
    answer = kube.patch_node(node, patch)
    if answer.status != 200:
        raise AssertionError(f"node {node}: {answer.status} {answer.message}")
    return node


def nfd_labels(kube: ControlPlane, node: str, prefix: str = "nvidia.com/") -> dict[str, str]:
    return {k: v for k, v in kube.labels(node).items() if k.startswith(prefix)}
