"""A simulated fleet on the real control plane (tests/kube/controlplane.py), with real writers beside NFD.

kwok (``sigs.k8s.io/kwok``, built by ``scripts/peers/build.sh kwok``) keeps N Nodes alive as their kubelets
would: it initialises each Node's status, renews its Lease every quarter of the Lease's duration, reports
status every 10-20 minutes, and runs the pods bound to its Nodes. Its Stage configurations are read from
the pinned module's own source at run time (``STAGES``), as kwok's release ships them. kwok has an identity
of its own (a client certificate for ``KWOK_USER``) with a FlowSchema at the ``exempt`` priority level, as
kwok's docs advise, so that the fleet's heartbeats are never queued behind the writers under test.

The Nodes are what a kubelet registers: created with their labels (so the server records a ``kubelet``
managedFields entry for them), a ``providerID``, and a GPU node's status (capacity, node info, 20 images).
On some of them real writers run, each as its pod runs it, with a pod-bound token of a Pod bound to that
Node: nfd-lite (the caller gives its command line, the chart's) and upstream NFD's nfd-worker, with one
nfd-master on a Node of its own (tests/kube/nfd.py).

What the server did is read at the server: its audit log (``AuditLog``: requests by identity and, for
pod-bound tokens, by the Node the pod is on; with ``LABEL_WRITES_AUDIT`` the bodies of Node writes, so
that every label a writer removed can be counted), its /metrics (``metrics``), its process's CPU and
memory (``process_usage``) and etcd's database size (``etcd_db_bytes``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.kube.controlplane import ROOT, ControlPlane, ControlPlaneError, kubeconfig_document
from tests.kube.nfd import NfdProcess, UpstreamNfd, sandbox_command
from tests.kube.process import LoggedProcess
from tests.ports import low_port

KWOK = ROOT / ".cache" / "peers" / "kwok" / "kwok"
KWOK_PEER = ROOT / "scripts" / "peers" / "kwok"
KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_HINT = "build it with scripts/install-tools.sh (or scripts/peers/build.sh kwok)"
# The Stages kwok's own "fast" node and pod configurations are made of, plus the heartbeat that keeps a
# Node's conditions fresh alongside its Lease (kwokctl's default set for a cluster with Leases).
STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
KWOK_USER = "kwok-controller"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # the Nodes kwok manages carry kwok.x-k8s.io/node=fake
FLEET_LABEL = "gpu-labeller.test/fleet"  # every Node of a fleet, valued with its name

LITE_USER = "system:serviceaccount:gpu-labeller:nfd-lite"
WORKER_USER = "system:serviceaccount:node-feature-discovery:nfd-worker"
MASTER_USER = "system:serviceaccount:node-feature-discovery:nfd-master"
NODE_CLAIM = "authentication.kubernetes.io/node-name"  # in a pod-bound token's user info
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})

# Audit rules for ControlPlane(audit_rules=...): the bodies of every Node write by the label writers on
# both sides (a removed label is in the body), and none of kwok's Lease renewals, which at 1,000 Nodes
# would be most of the log (kwok's request rate is in the server's metrics, by FlowSchema).
LABEL_WRITES_AUDIT: tuple[dict[str, Any], ...] = (
    {"level": "None", "users": [KWOK_USER], "resources": [{"group": "coordination.k8s.io"}]},
    {
        "level": "Request",
        "users": [LITE_USER, MASTER_USER, WORKER_USER],
        "verbs": ["patch", "update"],
        "resources": [{"group": "", "resources": ["nodes"]}],
    },
)

# The kernel SIGKILLs a child marked so when the process that started it dies (a killed test run leaves
# no kwok or writer behind). Looked up here, not in the child: a fork of a threaded process must not load.
_PRCTL = ctypes.CDLL(None).prctl
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


class Child(LoggedProcess):
    """A LoggedProcess that dies with the process that started it (lost when it changes its user)."""

    def start(self) -> Child:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        return self


def module_dir(peer: Path, module: str, hint: str) -> Path:
    """A pinned peer's module in Go's module cache, where its build left it (no network: GOPROXY=off)."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOPROXY": "off"}
    try:
        result = subprocess.run(
            ["go", "list", "-m", "-f", "{{.Dir}}", module],
            cwd=peer,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        raise ControlPlaneError(f"go is not installed, so {module} cannot be found: {hint}") from None
    directory = result.stdout.strip() if result.returncode == 0 else ""
    if not directory:
        raise ControlPlaneError(f"{module} is not in Go's module cache ({result.stderr.strip()}): {hint}")
    return Path(directory)


# ---- the Nodes ----------------------------------------------------------------------------------------


IDS = ("machineID", "systemUUID", "bootID")


def node_body(name: str, index: int, fleet: str) -> dict[str, Any]:
    """A GPU node as its kubelet registers it: kubelet's and the cloud's labels, a providerID, and a
    status of a real one's size (capacity, addresses, node info, 20 images); kwok adds the conditions."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "region-1",
        "topology.kubernetes.io/zone": f"region-1{'abc'[index % 3]}",
        FLEET_LABEL: fleet,
    }
    annotations = {
        KWOK_ANNOTATION: "fake",
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    resources = {"cpu": "192", "memory": "2113425040Ki", "pods": "110", "nvidia.com/gpu": "8"}
    resources |= {"ephemeral-storage": "3750157828Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    image = "registry.example.com/team/image-{}"
    images = [
        {"names": [f"{image.format(i)}@sha256:{i:064x}", f"{image.format(i)}:v1"], "sizeBytes": 10**8 + i}
        for i in range(20)
    ]
    address = f"10.{100 + index // 65536}.{index // 256 % 256}.{index % 256}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"providerID": f"kwok://{fleet}/{name}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                # UUID-shaped: kwok's template writes them unquoted, and all digits would read as a number
                **{key: f"{index:08x}-0000-4000-8000-{i:012x}" for i, key in enumerate(IDS)},
                "kernelVersion": "6.8.0-1015-aws",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://2.0.2",
                "kubeletVersion": "v1.37.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    }


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# ---- kwok ---------------------------------------------------------------------------------------------


def grant_kwok(kube: ControlPlane) -> None:
    """kwok's identity may do anything (it plays every kubelet), and its requests are exempt from API
    Priority and Fairness: a fleet's heartbeats must not wait behind the load under test."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": KWOK_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KWOK_USER}],
    }
    flow_schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": KWOK_USER},
        "spec": {
            "priorityLevelConfiguration": {"name": "exempt"},
            "matchingPrecedence": 200,
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": KWOK_USER}}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    kube.kubectl(
        "apply", "--server-side", "--field-manager=gpu-labeller-tests", "-f", "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [binding, flow_schema]}),
    )  # fmt: skip


class Kwok(Child):
    """kwok managing every Node annotated ``kwok.x-k8s.io/node=fake``, its Leases lasting
    ``lease_seconds`` (renewed every quarter of that, as a kubelet renews its 40 s Lease every 10 s)."""

    def __init__(self, kube: ControlPlane, workdir: Path, lease_seconds: int) -> None:
        if not os.access(KWOK, os.X_OK):
            raise ControlPlaneError(f"{KWOK} is missing: {KWOK_HINT}")
        source = module_dir(KWOK_PEER, KWOK_MODULE, KWOK_HINT)
        stages = [source / stage for stage in STAGES]
        if missing := [str(s) for s in stages if not s.is_file()]:
            raise ControlPlaneError(f"kwok's Stage configurations are missing: {', '.join(missing)}")
        workdir.mkdir(parents=True, exist_ok=True)
        grant_kwok(kube)
        pair = kube.client_certificate(KWOK_USER, ("kwok",))
        config = workdir / "kwok.kubeconfig"
        user = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
        config.write_text(json.dumps(kubeconfig_document(kube.url, kube.ca, user)))
        command = [
            str(KWOK),
            f"--kubeconfig={config}",
            *[f"--config={stage}" for stage in stages],
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            f"--node-lease-duration-seconds={lease_seconds}",
            "--cidr=10.64.0.0/12",  # a pod IP for every writer's pod
            "--v=WARN",  # INFO logs every Lease renewal
        ]
        env = {**os.environ, "HOME": str(workdir)}  # kwok reads ~/.kwok only when no --config is given
        super().__init__("kwok", command, env, workdir / "kwok.log")
        self.lease_seconds = lease_seconds


# ---- the fleet ----------------------------------------------------------------------------------------


class Fleet:
    """``with Fleet(kube, workdir, size) as fleet:`` kwok started, ``size`` Nodes created and Ready; every
    writer, kwok and NFD's master stopped when the block ends (the Nodes stay on the control plane).

    ``fleet.nodes`` are the Nodes' names; writers run on them with ``prepare_lite`` / ``prepare_worker``
    (prepared first, with their tokens, so that many ``start`` together) and ``start_master``."""

    def __init__(
        self,
        kube: ControlPlane,
        workdir: Path,
        size: int,
        *,
        name: str = "fleet",
        lease_seconds: int = 40,
        ready_timeout: float = 600.0,
    ) -> None:
        self.kube = kube
        self.workdir = workdir
        self.size = size
        self.name = name
        self.lease_seconds = lease_seconds
        self.ready_timeout = ready_timeout
        self.nodes = [f"{name}-{i:05d}" for i in range(size)]
        self.writers: list[LoggedProcess] = []
        self._nfd: UpstreamNfd | None = None
        self._next_uid = 200000  # each writer may run as a user of its own, as on a node of its own
        self.kwok: Kwok

    def __enter__(self) -> Fleet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # writers running as users of their own read their files below it
        self.kwok = Kwok(self.kube, self.workdir / "kwok", self.lease_seconds)
        self.kwok.start()
        try:
            self.create_nodes()
            self.wait_ready(self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_writers(self.writers)
        if self._nfd is not None:
            self._nfd.stop()
        self.kwok.stop()

    def create_nodes(self) -> None:
        """Created with their labels and status, as kubelets register, several at once."""

        def create(index: int) -> None:
            name = self.nodes[index]
            body = node_body(name, index, self.name)
            answer = self.kube.request("POST", "/api/v1/nodes?fieldManager=kubelet", body)
            if answer.status not in (201, 409):
                raise AssertionError(f"node {name}: {answer.status} {answer.message}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(self.size)))

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every Node of this fleet, from the server (paged, as a controller lists)."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = f"labelSelector={FLEET_LABEL}%3D{self.name}&limit=500"
            page = self.kube.must("GET", f"/api/v1/nodes?{query}" + (f"&continue={token}" if token else ""))
            items += page["items"]
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def not_ready(self) -> list[str]:
        """The fleet's Nodes whose Ready condition is not True (none missing from the list either)."""
        listed = {node["metadata"]["name"]: node for node in self.list_nodes()}
        return [name for name in self.nodes if name not in listed or not ready(listed[name])]

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while waiting := self.not_ready():
            if not self.kwok.running():
                raise ControlPlaneError(f"kwok exited:\n{self.kwok.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{len(waiting)} of {self.size} Nodes not Ready after {timeout:.0f} s "
                    f"(first: {waiting[0]}); kwok's log is {self.kwok.log}"
                )
            time.sleep(1.0)

    def lease_ages(self) -> dict[str, float]:
        """Seconds since each fleet Node's Lease was last renewed (a Node without one is absent)."""
        leases = self.kube.must("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
        now = time.time()
        ages: dict[str, float] = {}
        mine = set(self.nodes)
        for lease in leases["items"]:
            name, renewed = lease["metadata"]["name"], (lease.get("spec") or {}).get("renewTime")
            if name in mine and renewed:
                ages[name] = now - _timestamp(renewed)
        return ages

    # ---- writers ----

    def uid(self) -> int:
        self._next_uid += 1
        return self._next_uid

    def prepare_lite(
        self,
        node: str,
        argv: Sequence[str],
        env: dict[str, str],
        *,
        uid: int | None = None,
    ) -> LoggedProcess:
        """nfd-lite (``argv``: its program and arguments, the chart's) as its pod on ``node`` runs it: a
        token of a Pod bound to ``node`` at the in-cluster path, ``env`` over the in-cluster variables;
        with ``uid``, as that user. Not started."""
        home = self.workdir / "lite" / node
        home.mkdir(parents=True, exist_ok=True)
        sa_dir, incluster = self.kube.in_cluster(home / "serviceaccount", self.kube.pod_token(node))
        command = sandbox_command(sa_dir, list(argv), uid=uid)
        writer = Child("nfd-lite", command, {**os.environ, **incluster, **env}, home / "nfd-lite.log")
        self.writers.append(writer)
        return writer

    @property
    def nfd(self) -> UpstreamNfd:
        """Upstream NFD's CRDs and RBAC, installed on first use."""
        if self._nfd is None:
            self._nfd = UpstreamNfd(self.kube, self.workdir / "nfd").__enter__()
        return self._nfd

    def start_master(self, node: str) -> NfdProcess:
        port = low_port()
        master = self.nfd.start_master(node, f"-port={port}")
        master.port = port  # the later -port is the one it serves /healthz on
        self.writers.append(master)
        return master

    def prepare_worker(self, node: str, features: Path, *, uid: int | None = None) -> NfdProcess:
        """nfd-worker as its DaemonSet runs it on ``node``, reading ``features`` as its features.d."""
        port = low_port()
        worker = self.nfd.prepare_worker(node, features, f"-port={port}", uid=uid)
        worker.port = port
        self.writers.append(worker)
        return worker

    @staticmethod
    def start_writers(processes: Iterable[LoggedProcess]) -> float:
        """Start them all, as a rollout does; returns the wall clock (epoch seconds) at the first."""
        began = time.time()
        for process in processes:
            process.start()
        return began

    @staticmethod
    def stop_writers(processes: Iterable[LoggedProcess]) -> None:
        """Stop them all at once (each asked first, then each waited for), as a rollout would."""
        running = [p for p in processes if p.running()]
        for process in running:
            assert process.process is not None
            process.process.send_signal(signal.SIGTERM)
        for process in running:
            process.stop()


# ---- what the server saw ----------------------------------------------------------------------------


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Request:
    """One request as the audit log records it."""

    user: str
    node: str  # the Node of the Pod a pod-bound token belongs to; "" for other identities
    verb: str
    resource: str  # e.g. "nodes", "nodes/status", "leases", or the path of a non-resource request
    name: str
    dry_run: bool
    code: int
    at: float  # when the server received it, epoch seconds
    removed: tuple[str, ...]  # label keys the write removed (only where the audit level is Request)
    uri: str = ""  # the request's path and query

    @property
    def write(self) -> bool:
        return self.verb in WRITES and not self.dry_run


def removed_labels(body: Any) -> tuple[str, ...]:
    """The label keys a Node write's body removes: ``null`` values of a merge or strategic-merge patch,
    ``remove`` operations of a JSON patch (NFD's master)."""
    if isinstance(body, dict):
        labels = (body.get("metadata") or {}).get("labels") or {}
        return tuple(sorted(key for key, value in labels.items() if value is None))
    if isinstance(body, list):
        prefix = "/metadata/labels/"
        return tuple(
            sorted(
                op["path"][len(prefix) :].replace("~1", "/").replace("~0", "~")
                for op in body
                if isinstance(op, dict) and op.get("op") == "remove" and op.get("path", "").startswith(prefix)
            )
        )
    return ()


def _request(event: dict[str, Any]) -> Request:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource") or event["requestURI"].split("?")[0]
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    user = event.get("user") or {}
    node = ((user.get("extra") or {}).get(NODE_CLAIM) or [""])[0]
    return Request(
        user=user.get("username", ""),
        node=node,
        verb=event["verb"],
        resource=resource,
        name=ref.get("name", ""),
        dry_run="dryRun=All" in event["requestURI"],
        code=int((event.get("responseStatus") or {}).get("code") or 0),
        at=_timestamp(event["requestReceivedTimestamp"]),
        removed=removed_labels(event.get("requestObject")),
        uri=event["requestURI"],
    )


class AuditLog:
    """The server's audit log, read on from where the last ``read`` stopped: each request once (a watch
    when it started, so one still open is counted), oldest first. It survives an API server restart,
    which appends to the same file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._seen: set[str] = set()
        self.requests: list[Request] = []

    def read(self) -> list[Request]:
        """Every request so far (the new ones parsed now)."""
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as log:
            log.seek(self._offset)
            chunk = log.read()
            complete = chunk.rfind(b"\n") + 1  # a line still being written waits for the next read
            self._offset += complete
            for line in chunk[:complete].splitlines():
                event = json.loads(line)
                if event["auditID"] in self._seen:
                    continue
                self._seen.add(event["auditID"])
                self.requests.append(_request(event))
        return self.requests

    def between(self, start: float, end: float = float("inf"), users: Iterable[str] = ()) -> list[Request]:
        wanted = set(users)
        return [r for r in self.read() if start <= r.at < end and (not wanted or r.user in wanted)]


def process_usage(pid: int) -> tuple[float, float, float]:
    """(CPU seconds, RSS MiB, peak RSS MiB) of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return cpu, int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


Sample = tuple[str, tuple[tuple[str, str], ...], float]  # metric name, sorted labels, value


def _scrape(url: str, headers: dict[str, str], context: ssl.SSLContext | None) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families  # a test dependency

    request = urllib.request.Request(url, headers={**headers, "Accept": "text/plain"})
    with urllib.request.urlopen(request, context=context, timeout=60) as answer:
        text = answer.read().decode()
    return [
        (sample.name, tuple(sorted(sample.labels.items())), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def metrics(kube: ControlPlane) -> list[Sample]:
    """kube-apiserver's /metrics, as the admin reads them."""
    context = ssl.create_default_context(cafile=str(kube.ca))
    return _scrape(f"{kube.url}/metrics", {"Authorization": f"Bearer {kube.admin_token}"}, context)


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for metric, have, value in samples
        if metric == name and all((key, want) in have for key, want in labels.items())
    )


def etcd_db_bytes(kube: ControlPlane) -> float:
    """etcd's database file size (what its quota counts)."""
    samples = _scrape(f"http://127.0.0.1:{kube.etcd_port}/metrics", {}, None)
    return total(samples, "etcd_mvcc_db_total_size_in_bytes")


# ---- labels as the server has them ------------------------------------------------------------------


class LabelWatch:
    """One watch on the fleet's Nodes as admin, recording when each label value was first seen on each
    Node (so a waiter is woken by the event itself, not by polling). When the watch breaks (an API server
    restart, a 410 Gone after compaction) it lists again and watches on from the list."""

    def __init__(self, kube: ControlPlane, fleet: str) -> None:
        self.kube = kube
        self.selector = f"{FLEET_LABEL}%3D{fleet}"
        self.cond = threading.Condition()
        self.seen: dict[tuple[str, str, str], float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.lists = 0  # complete lists so far: one at the start, one after each break
        self._stop = threading.Event()
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def __enter__(self) -> LabelWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, nodes: Iterable[dict[str, Any]], replace: bool = False) -> None:
        now = time.time()
        with self.cond:
            if replace:
                self.labels.clear()
            for node in nodes:
                name, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
                self.labels[name] = labels
                for key, value in labels.items():
                    self.seen.setdefault((name, key, value), now)
            self.cond.notify_all()

    def _list(self) -> str:
        items: list[dict[str, Any]] = []
        token, version = "", ""
        while True:
            query = f"labelSelector={self.selector}&limit=500" + (f"&continue={token}" if token else "")
            page = self.kube.must("GET", f"/api/v1/nodes?{query}")
            items += page["items"]
            version = page["metadata"]["resourceVersion"]
            token = page["metadata"].get("continue") or ""
            if not token:
                break
        self._record(items, replace=True)
        self.lists += 1
        return str(version)

    def _run(self) -> None:
        context = ssl.create_default_context(cafile=str(self.kube.ca))
        headers = {"Authorization": f"Bearer {self.kube.admin_token}"}
        while not self._stop.is_set():
            try:
                version = self._list()
                query = f"labelSelector={self.selector}&watch=true&resourceVersion={version}"
                url = f"{self.kube.url}/api/v1/nodes?{query}&timeoutSeconds=300&allowWatchBookmarks=true"
                with urllib.request.urlopen(
                    urllib.request.Request(url, headers=headers), context=context, timeout=330
                ) as answer:
                    self._response = answer
                    for line in answer:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            break  # 410 Gone and the like: list again
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._record([event["object"]])
            except Exception:  # the server restarting, or close() cutting the stream: list again
                pass
            self._response = None
            self._stop.wait(0.5)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            if self._response is not None:
                self._response.close()

    def count_with(self, nodes: Iterable[str], labels: dict[str, str]) -> int:
        """How many of ``nodes`` carry every one of ``labels`` now."""
        with self.cond:
            return sum(1 for n in nodes if all(self.labels.get(n, {}).get(k) == v for k, v in labels.items()))

    def labelled_at(self, node: str, labels: dict[str, str]) -> float | None:
        """When ``node`` was first seen with all of ``labels`` (the latest; None if one never was)."""
        with self.cond:
            times = [self.seen.get((node, key, value)) for key, value in labels.items()]
        return None if None in times else max(t for t in times if t is not None)

    def wait(self, nodes: Sequence[str], labels: dict[str, str], timeout: float) -> list[str]:
        """Wait until every one of ``nodes`` carries ``labels``; the ones that do not after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                missing = [
                    n for n in nodes if any(self.labels.get(n, {}).get(k) != v for k, v in labels.items())
                ]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self.cond.wait(min(left, 1.0))


def features(directory: Path, text: str, name: str = "gfd") -> None:
    """A feature file written as gfd writes it: a temp file renamed into place."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{name}.tmp"
    temp.write_text(text)
    os.replace(temp, directory / name)


__all__ = [
    "KWOK_USER",
    "LABEL_WRITES_AUDIT",
    "LITE_USER",
    "MASTER_USER",
    "WORKER_USER",
    "AuditLog",
    "Fleet",
    "LabelWatch",
    "Request",
    "etcd_db_bytes",
    "features",
    "metrics",
    "process_usage",
    "total",
]
