"""Shared set-up for the benchmarks on the real control plane (tests/kube): kube-apiserver, which keeps an
audit log of every request, the project's rbac/ applied, upstream NFD installed from its own manifests,
and both label writers run as their pods run them (pod-bound tokens at the in-cluster path, NFD's
features.d; nfd-lite installed as the image installs it, with the chart's arguments).

Requests are counted at the server from its audit log, by the identity that made them: each request once
(a watch when it started, so one still open at the end is counted).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.support.chart import nfd_lite_args, nfd_lite_env
from benchmarks.support.install import Installed
from tests.kube.controlplane import ControlPlane
from tests.kube.fixtures import apply_rbac
from tests.kube.nfd import NAMESPACE as NFD_NAMESPACE
from tests.kube.nfd import NfdProcess, UpstreamNfd, as_kubelet_registers, sandbox_command
from tests.kube.process import LoggedProcess
from tests.ports import low_port

LITE_USER = "system:serviceaccount:gpu-labeller:nfd-lite"
WORKER_USER = "system:serviceaccount:node-feature-discovery:nfd-worker"
MASTER_USER = "system:serviceaccount:node-feature-discovery:nfd-master"
# Each writer runs as a user of its own, as on a node of its own (the chart's nfd-lite is uid 65532):
# per-user kernel limits, such as 128 inotify instances, would otherwise stop the count near 128.
FIRST_UID = 200000
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class Request:
    user: str
    verb: str
    resource: str
    at: float  # seconds since the epoch, when the server received it

    @property
    def write(self) -> bool:
        return self.verb in WRITES


def server_requests(kube: ControlPlane, since: float = 0.0) -> list[Request]:
    """Every request the server received at or after ``since`` (epoch seconds), from its audit log."""
    found = []
    for event in kube.requests():
        received = datetime.fromisoformat(
            event["requestReceivedTimestamp"].replace("Z", "+00:00")
        ).timestamp()
        if received < since:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event["requestURI"].split("?")[0])
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        found.append(Request(event["user"].get("username", ""), event["verb"], resource, received))
    return found


def tally(requests: Iterable[Request], user: str) -> Counter[str]:
    """``verb resource`` -> count, for one identity."""
    return Counter(f"{r.verb} {r.resource}" for r in requests if r.user == user)


class NodeWatch:
    """One watch on all Nodes (as admin), recording when each label value was first seen on each Node, so
    a waiter is woken by the event itself rather than by polling."""

    def __init__(self, kube: ControlPlane) -> None:
        self.kube = kube
        self.cond = threading.Condition()
        self.seen: dict[tuple[str, str, str], float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self._stop = False
        listed = kube.must("GET", "/api/v1/nodes")
        self._record(listed["items"], time.perf_counter())
        self.thread = threading.Thread(
            target=self._run, args=(listed["metadata"]["resourceVersion"],), daemon=True
        )
        self.thread.start()

    def _record(self, nodes: list[dict[str, Any]], now: float) -> None:
        with self.cond:
            for node in nodes:
                name, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
                self.labels[name] = labels
                for key, value in labels.items():
                    self.seen.setdefault((name, key, value), now)
            self.cond.notify_all()

    def _run(self, version: str) -> None:
        context = ssl.create_default_context(cafile=str(self.kube.ca))
        headers = {"Authorization": f"Bearer {self.kube.admin_token}"}
        while not self._stop:
            url = f"{self.kube.url}/api/v1/nodes?watch=true&resourceVersion={version}&timeoutSeconds=600"
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, headers=headers), context=context
                ) as r:
                    for line in r:
                        event = json.loads(line)
                        if event["type"] in ("ADDED", "MODIFIED"):
                            version = event["object"]["metadata"]["resourceVersion"]
                            self._record([event["object"]], time.perf_counter())
            except OSError:
                if not self._stop:
                    time.sleep(0.2)

    def wait(self, node: str, key: str, value: str, timeout: float) -> float | None:
        """When ``key=value`` was first seen on ``node`` (perf_counter), or None after ``timeout``."""
        with self.cond:
            self.cond.wait_for(lambda: (node, key, value) in self.seen, timeout)
            return self.seen.get((node, key, value))

    def count_with(self, nodes: Iterable[str], key: str, value: str) -> int:
        with self.cond:
            return sum(1 for n in nodes if self.labels.get(n, {}).get(key) == value)

    def close(self) -> None:
        self._stop = True


class LiteWriter(LoggedProcess):
    """nfd-lite as the chart's pod runs it, for one Node, as user ``uid``: in-cluster mode, the chart's
    arguments for ``directories``; prepared (token issued) first, ``start()`` later."""

    def __init__(
        self,
        kube: ControlPlane,
        installed: Installed,
        workdir: Path,
        node: str,
        directories: list[Path],
        uid: int,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        sa_dir, env = kube.in_cluster(workdir / "serviceaccount", kube.pod_token(node))
        argv = [str(installed.nfd_lite), *nfd_lite_args(directories)]
        command = sandbox_command(sa_dir, argv, uid=uid)
        env = installed.env({**os.environ, **env}) | nfd_lite_env(node)
        super().__init__("nfd-lite", command, env, workdir / "nfd-lite.log")


def write_atomic(directory: Path, text: str, name: str = "gfd") -> None:
    temp = directory / f".{name}.tmp"
    temp.write_text(text)
    os.replace(temp, directory / name)


class Cluster:
    """``with Cluster(installed) as c:`` the audited control plane, rbac/ applied, NFD installed and
    nfd-master running on a Node of its own. Everything started here is stopped at the end."""

    def __init__(self, installed: Installed) -> None:
        self.installed = installed
        self.keep_logs = False  # set when something failed inside, though the block itself ended well

    def __enter__(self) -> Cluster:
        self.tmp = Path(tempfile.mkdtemp(prefix="nfd-compare-"))
        self.tmp.chmod(0o755)  # the writers run as users of their own
        self.next_uid = FIRST_UID
        self.kube = ControlPlane(self.tmp / "kube")
        self.kube.__enter__()
        self.lite: list[LiteWriter] = []
        try:
            apply_rbac(self.kube)
            self.kube.create_node("nfd-master-host")
            self.nfd = UpstreamNfd(self.kube, self.tmp / "nfd").__enter__()
            self.master = self.nfd.start_master("nfd-master-host")
            self.watch = NodeWatch(self.kube)
        except BaseException:
            self.kube.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.watch.close()
        for writer in self.lite:
            writer.stop()
        self.nfd.stop()
        self.kube.stop()
        if kind is None and not self.keep_logs:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:  # the logs of every process and the audit log, for a look at what went wrong
            print(f"logs kept in {self.tmp}", file=sys.stderr)

    def node(self, name: str) -> str:
        self.kube.create_node(name)
        return as_kubelet_registers(self.kube, name)

    def _uid(self) -> int:
        self.next_uid += 1
        return self.next_uid

    def prepare_lite(self, node: str, directories: list[Path]) -> LiteWriter:
        writer = LiteWriter(
            self.kube, self.installed, self.tmp / "lite" / node, node, directories, self._uid()
        )
        self.lite.append(writer)
        return writer

    def prepare_worker(self, node: str, features: Path) -> NfdProcess:
        # Its health and metrics port as nfd-lite's: below the ephemeral range (the later -port wins).
        return self.nfd.prepare_worker(node, features, f"-port={low_port()}", uid=self._uid())

    def stop(self, processes: Iterable[LoggedProcess]) -> None:
        """Stop them all at once (each asked first, then each waited for), as a rollout would."""
        started = [p for p in processes if p.running()]
        for process in started:
            assert process.process is not None
            process.process.send_signal(signal.SIGTERM)
        for process in started:
            process.stop()

    def forget(self, nodes: Iterable[str]) -> None:
        """Delete the Nodes, and NFD's NodeFeature objects (the workers' records of every node), so that
        later rounds start as clean as the first."""
        for node in nodes:
            self.kube.delete_node(node)
        self.kube.request("DELETE", f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NFD_NAMESPACE}/nodefeatures")
