"""`gfd doctor --smoke-test`: one short-lived GPU pod on a node, and which layer stops it.

The I/O edge: reads the Node and the RuntimeClass, creates the pod, polls it and its events until it is
done or stuck, reads its logs, and deletes it, always: also on Ctrl-C, SIGTERM and timeout (signals are
held off while it deletes). The verdicts come from ``cluster``, ``start`` and ``inside``, which do no I/O.
Run by an admin with a kubeconfig, through the official client; nothing of the chart's RBAC is used.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from gfd.doctor.engine import Judge, bottom_up, first_failure
from gfd.doctor.kube import one_line
from gfd.doctor.model import Check, Layer
from gfd.doctor.probe import ProbeOutputError, ProbeResult
from gfd.doctor.smoke import cluster as smoke_cluster
from gfd.doctor.smoke import inside as smoke_inside
from gfd.doctor.smoke import start as smoke_start
from gfd.doctor.smoke.model import (
    CUDA,
    DEVICE_PLUGIN,
    GPUS,
    LABELS,
    NODE,
    NVML,
    RUNTIME_CLASS,
    SCHEDULING,
    START,
    WORKLOAD,
    ApiRead,
    Json,
    PodRun,
    condition,
)
from gfd.doctor.smoke.pod import (
    APP,
    GPU_RESOURCE,
    PROBE_CONTAINER,
    WORKLOAD_CONTAINER,
    SmokeOptions,
    manifest,
)

REQUEST_TIMEOUT_S = 10
POLL_S = 0.5
DELETE_WAIT_S = 30


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while the pod existed; it has been deleted by the time this propagates."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


@dataclass(frozen=True)
class SmokeReport:
    checks: list[Check]
    pod: str | None  # namespace/name of the pod, when one was made
    left_behind: bool = False  # the pod was still there after deleting it (then named on stderr)


class SmokeTest:
    def __init__(self, api: Any, options: SmokeOptions) -> None:
        from kubernetes import client

        # Typed Any: the smoke test sends and reads the API's JSON, not the client's model classes.
        self.core: Any = client.CoreV1Api(api)
        self.node_api: Any = client.NodeV1Api(api)
        self.options = options
        self.pod_name = f"{APP}-{secrets.token_hex(3)}"
        self.left_behind = False

    @property
    def pod(self) -> str:
        return f"{self.options.namespace}/{self.pod_name}"

    def run(self) -> SmokeReport:
        o = self.options
        node = self._read(lambda: self.core.read_node(o.node, **_raw()))
        found: Json = node.found or {}
        rc = (
            self._read(lambda: self.node_api.read_runtime_class(o.runtime_class, **_raw()))
            if o.runtime_class
            else None
        )
        handler = rc.found.get("handler") if rc and rc.found else None
        cluster = bottom_up(
            [
                (NODE, lambda: smoke_cluster.node(node, o.node)),
                (LABELS, lambda: smoke_cluster.labels(found)),
                (DEVICE_PLUGIN, lambda: smoke_cluster.device_plugin(found)),
                (RUNTIME_CLASS, lambda: smoke_cluster.runtime_class(rc, o.runtime_class)),
            ]
        )
        failed = first_failure(cluster)
        if failed is not None:  # a pod would only wait in Pending: make none
            return SmokeReport(
                cluster + bottom_up(_pod_layers(PodRun(), o, found, handler), failed.layer), None
            )
        run = self._run_pod()
        checks = cluster + bottom_up(_pod_layers(run, o, found, handler))
        return SmokeReport(checks, None if run.refused else self.pod, self.left_behind)

    # ---- the pod ----

    def _run_pod(self) -> PodRun:
        with _signals_raise():
            try:
                from kubernetes.client.rest import ApiException

                try:
                    self.core.create_namespaced_pod(
                        self.options.namespace, manifest(self.options, self.pod_name), **_raw()
                    )
                except ApiException as err:
                    return PodRun(refused=_message(err))
                return self._watch()
            finally:
                with _signals_held():
                    self.left_behind = not self._delete()

    def _watch(self) -> PodRun:
        o = self.options
        deadline = time.monotonic() + o.timeout_s
        pod: Json | None = None
        events: tuple[Json, ...] = ()
        timed_out = False
        while True:
            pod = (
                self._read(lambda: self.core.read_namespaced_pod(self.pod_name, o.namespace, **_raw())).found
                or pod
            )
            events = self._events() or events
            if smoke_start.settled(pod, events):
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(POLL_S)
        said = condition(pod, "PodScheduled").get("message", "")
        holders = self._gpu_holders() if f"Insufficient {GPU_RESOURCE}" in said else ()
        probe_log = self._log(pod, PROBE_CONTAINER)
        probe: ProbeResult | None = None
        probe_error = None
        try:
            probe = ProbeResult.from_log(probe_log or "")
        except ProbeOutputError as err:
            probe_error = str(err)
        return PodRun(
            pod=pod,
            events=events,
            probe_log=probe_log,
            workload_log=self._log(pod, WORKLOAD_CONTAINER),
            timed_out=timed_out,
            gpu_holders=holders,
            probe=probe,
            probe_error=probe_error,
        )

    def _events(self) -> tuple[Json, ...]:
        selector = f"involvedObject.kind=Pod,involvedObject.name={self.pod_name}"
        read = self._read(
            lambda: self.core.list_namespaced_event(self.options.namespace, field_selector=selector, **_raw())
        )
        return tuple((read.found or {}).get("items") or ())

    def _log(self, pod: Json | None, container: str) -> str | None:
        started = any(
            c.get("name") == container and ({"running", "terminated"} & set(c.get("state") or {}))
            for c in smoke_start.containers(pod)
        )
        if not started:
            return None
        with contextlib.suppress(Exception):  # the log is evidence; without it the report says so
            answer = self.core.read_namespaced_pod_log(
                self.pod_name, self.options.namespace, container=container, tail_lines=200, **_raw()
            )
            return str(answer.data.decode("utf-8", errors="replace"))
        return None

    def _gpu_holders(self) -> tuple[tuple[str, int], ...]:
        """The pods on the node that hold GPUs (pods that ended hold none)."""
        selector = f"spec.nodeName={self.options.node},status.phase!=Succeeded,status.phase!=Failed"
        read = self._read(lambda: self.core.list_pod_for_all_namespaces(field_selector=selector, **_raw()))
        held = []
        for p in (read.found or {}).get("items") or []:
            count = _gpus_requested(p)
            if count:
                meta = p.get("metadata") or {}
                held.append((f"{meta.get('namespace')}/{meta.get('name')}", count))
        return tuple(held)

    def _delete(self) -> bool:
        """Delete the pod and wait until it is gone (the kubelet stopped its containers); True when gone."""
        from kubernetes.client.rest import ApiException

        o = self.options
        with contextlib.suppress(ApiException):  # 404: never made, or already gone
            self.core.delete_namespaced_pod(self.pod_name, o.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        deadline = time.monotonic() + DELETE_WAIT_S
        while time.monotonic() < deadline:
            read = self._read(lambda: self.core.read_namespaced_pod(self.pod_name, o.namespace, **_raw()))
            if read.status == 404:
                return True
            time.sleep(POLL_S)
        return False

    @staticmethod
    def _read(call: Callable[[], Any]) -> ApiRead:
        from kubernetes.client.rest import ApiException

        try:
            return ApiRead(json.loads(call().data))
        except ApiException as err:
            return ApiRead(None, err.status, _message(err))
        except Exception as err:  # connection refused, DNS, TLS: urllib3 raises many kinds
            return ApiRead(None, None, one_line(err, 200))


def _pod_layers(run: PodRun, o: SmokeOptions, node: Json, handler: str | None) -> list[tuple[Layer, Judge]]:
    labels: dict[str, str] = dict((node.get("metadata") or {}).get("labels") or {})
    return [
        (SCHEDULING, lambda: smoke_start.scheduling(run, o, node)),
        (START, lambda: smoke_start.start(run, o, handler)),
        (NVML, lambda: smoke_inside.nvml(run, o, handler)),
        (GPUS, lambda: smoke_inside.gpus(run, labels)),
        (CUDA, lambda: smoke_inside.cuda(run, o)),
        (WORKLOAD, lambda: smoke_inside.workload(run, o)),
    ]


def _raw() -> dict[str, Any]:
    """Ask the client for the answer's JSON, not its model classes: the judges read the API's own shapes."""
    return {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S}


def _message(err: Any) -> str:
    try:
        return one_line(json.loads(err.body).get("message") or err.reason)
    except (TypeError, ValueError, AttributeError):
        return one_line(f"HTTP {err.status} {err.reason}")


def _gpus_requested(pod: Json) -> int:
    """What the scheduler counts: the larger of any one init container and the containers together."""
    spec = pod.get("spec") or {}

    def asks(c: Json) -> int:
        resources = c.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        try:
            return int(value or 0)
        except ValueError:
            return 0

    inits = [asks(c) for c in spec.get("initContainers") or []]
    return max([sum(asks(c) for c in spec.get("containers") or []), *inits])


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals(handler: Any) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # embedded: the caller owns signals
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _signals_raise() -> contextlib.AbstractContextManager[None]:
    """Ctrl-C and SIGTERM become ``Interrupted`` while the pod exists, so the delete in ``finally`` runs."""
    return _signals(_raise)


def _signals_held() -> contextlib.AbstractContextManager[None]:
    """While deleting, a second Ctrl-C must not cut the delete short (it takes a few seconds at most)."""
    return _signals(signal.SIG_IGN)
