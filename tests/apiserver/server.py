"""FakeApiServer: an in-process Kubernetes API server over real HTTP, for what a real server cannot be made
to do on demand: injected 5xx answers, 429 with Retry-After, slow answers, connection resets and dropped
watches. Everything else belongs against the real control plane (tests/kube).

    with FakeApiServer() as api:
        api.add_node("gpu-1")
        token = api.token_for_service_account("gpu-labeller", "nfd-lite", node_name="gpu-1")
        api.write_kubeconfig(tmp_path / "kubeconfig", token)

Authorization evaluates the RBAC manifests in rbac/ (or `rbac_dir`), admission the
ValidatingAdmissionPolicy found there. Label and annotation validation is written from Kubernetes' own
definitions (tests/apiserver/labelrules.py, not the product's k8slabels) and pinned to a real
kube-apiserver's answers by tests/apiserver/test_labelrules.py. See docs/apiserver.md for the whole surface.

Real behaviour it does not model (a test that depends on one of these belongs in tests/kube):
- resources other than Nodes (and read-only RuntimeClasses): no Pods, Namespaces, ServiceAccounts,
  TokenRequest, RBAC or admission objects served; creating Nodes only through add_node();
- tokens are opaque strings, not signed JWTs: no expiry, audience, issuer or bound-object checks;
- validation of anything but label keys/values, annotation keys/size and taint key/effect; no
  OpenAPI schema, unknown-field (`fieldValidation`) or immutable-field checks beyond the name;
- admission plugins other than the ValidatingAdmissionPolicy in rbac/; policy params, namespace selectors,
  audit annotations; mutating admission;
- managedFields beyond labels and annotations; server-side apply creating a missing object (answers 404);
- `limit`/`continue` paging, `resourceVersionMatch`, `sendInitialEvents` (watch lists), the watch cache's
  timing, protobuf and CBOR, chunked request bodies;
- API Priority and Fairness: a 429 only comes from an injected fault, never from load;
- a non-string label or annotation value is refused with a shorter message than the real server's JSON
  decoding error (422 for a patch, as there; the real server answers 400 to a PUT).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.apiserver.admission import Admission
from tests.apiserver.auth import Rbac, Tokens
from tests.apiserver.faults import Fault, Faults
from tests.apiserver.handler import Handler, RequestRecord
from tests.apiserver.identities import Identities
from tests.apiserver.managed import record_update, supplied
from tests.apiserver.patches import merge_patch
from tests.apiserver.store import Store
from tests.apiserver.tls import make_certificate, server_context

REPO_RBAC = Path(__file__).resolve().parents[2] / "rbac"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        # Answers and watch events are small writes: without this, Nagle and delayed ACKs add ~40 ms each.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            # The handshake happens in the handler thread, so one slow client cannot stall accept().
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients going away mid-answer are normal here


class FakeApiServer(Identities):
    def __init__(
        self,
        rbac_dir: Path | None = REPO_RBAC,
        *,
        admission: bool = True,
        version: str = "1.32.0",
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
        tls: bool = False,
    ) -> None:
        self.store = Store()
        self.tokens = Tokens()
        self.faults = Faults()
        self.rbac = Rbac.from_dir(rbac_dir) if rbac_dir else Rbac([])
        self.admission = Admission.from_dir(rbac_dir) if rbac_dir and admission else Admission([])
        self.version = version
        self.bookmark_interval = (
            bookmark_interval  # seconds between BOOKMARK events on watches that allow them
        )
        self.watch_timeout = watch_timeout  # upper bound for a watch without timeoutSeconds
        self.requests: list[RequestRecord] = []
        self._lock = threading.Condition()
        self._open_watches = 0
        self._watches_started = 0
        self._connections: set[socket.socket] = set()
        self._http: _Server | None = None
        self._thread: threading.Thread | None = None
        self.tls = tls
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.ca_cert: Path | None = None  # with tls=True: the serving certificate, which is also its CA

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        handler = type("BoundHandler", (Handler,), {"api": self})
        self._http = _Server(("127.0.0.1", 0), handler)
        if self.tls:
            self._tmp = tempfile.TemporaryDirectory(prefix="fake-apiserver-")
            self.ca_cert, key = make_certificate(Path(self._tmp.name))
            self._http.ssl_context = server_context(self.ca_cert, key)
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.store.stop()
        if self._http is not None:
            self._http.shutdown()
            with self._lock:
                connections = list(self._connections)
            for conn in connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._http.server_close()
            self._http = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def address(self) -> str:
        assert self._http is not None, "server not started"
        host, port = self._http.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}"

    @property
    def in_cluster_env(self) -> dict[str, str]:
        """KUBERNETES_SERVICE_HOST/PORT as the kubelet sets them for pods (use with tls=True)."""
        host, _, port = self.address.rpartition(":")
        return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}

    # -- objects -----------------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        allocatable: dict[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A Node as a kubelet registers it. labels=None gives the kubelet's own labels (hostname, os, arch),
        all owned by the manager "kubelet"; pass {} for a Node without labels."""
        if labels is None:
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            }
        resources = allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"}
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations or {})},
            "spec": {"taints": list(taints)} if taints else {},
            "status": {"allocatable": dict(resources), "capacity": dict(resources)},
        }
        empty: dict[str, Any] = {"metadata": {"name": name}}
        record_update(empty, node, "kubelet")
        return self.store.create("nodes", node)

    def get_node(self, name: str) -> dict[str, Any]:
        obj = self.store.get("nodes", name)
        if obj is None:
            raise KeyError(f"no node {name!r}")
        return obj

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.get_node(name)["metadata"].get("labels") or {})

    def set_node_labels(
        self,
        name: str,
        labels: dict[str, str | None],
        *,
        replace: bool = False,
        manager: str = "kubectl-label",
    ) -> dict[str, Any]:
        """Out-of-band edit: merge `labels` into the Node's (None removes a key), or with replace=True make
        them the whole label set. Bumps resourceVersion and emits a watch event (none if nothing changed)."""
        if replace:
            current = self.get_node(name)["metadata"].get("labels") or {}
            patch: dict[str, Any] = dict.fromkeys(current) | dict(labels)
        else:
            patch = dict(labels)
        return self.patch_node(name, {"metadata": {"labels": patch}}, manager=manager)

    def patch_node(self, name: str, patch: dict[str, Any], *, manager: str = "kubectl") -> dict[str, Any]:
        """Out-of-band JSON merge patch by an admin, bypassing RBAC and admission."""
        with self.store.cond:
            current = self.get_node(name)
            new = merge_patch(current, patch)
            if not supplied(new["metadata"].get("managedFields")):
                new["metadata"]["managedFields"] = current["metadata"].get("managedFields")
            record_update(current, new, manager)
            return self.store.replace("nodes", current, new)

    def delete_node(self, name: str) -> None:
        self.store.delete("nodes", name)

    def add_runtime_class(self, name: str, handler: str | None = None) -> dict[str, Any]:
        obj = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name},
            "handler": handler or name,
        }
        return self.store.create("runtimeclasses", obj)

    @property
    def resource_version(self) -> int:
        return self.store.rv

    # -- faults and observation --------------------------------------------------------------------
    def inject(self, **fault: Any) -> Fault:
        """Make the next matching request(s) fail; see Fault for the fields. Returns the Fault (`.hits`)."""
        return self.faults.add(Fault(**fault))

    def clear_faults(self) -> None:
        self.faults.clear()

    def drop_watches(self, reset: bool = False) -> None:
        """End every open watch stream now: cleanly (the response ends, as after a server-side timeout), or
        with reset=True by a TCP reset mid-stream (as a dying load balancer or API server does)."""
        self.store.drop_watches(reset)

    def compact(self) -> None:
        """Forget the event history: a watch from any older resourceVersion is answered 410."""
        self.store.compact()

    def send_bookmarks(self) -> None:
        """Make every open watch that allows bookmarks send one now."""
        self.store.send_bookmarks()

    def record(self, entry: RequestRecord) -> None:
        with self._lock:
            self.requests.append(entry)

    def count(self, method: str | None = None, path: str | None = None, user: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method)
                and (path is None or r.path == path)
                and (user is None or r.user == user)
            )

    @property
    def open_watches(self) -> int:
        with self._lock:
            return self._open_watches

    def wait_for_watches(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until at least `count` watch streams are open (True) or the timeout passes (False)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._open_watches >= count, timeout)

    def wait_for_watch_starts(self, count: int, timeout: float = 10.0) -> bool:
        """Block until `count` watch streams have been started since the server started (True), or timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._watches_started >= count, timeout)

    def watch_opened(self) -> None:
        with self._lock:
            self._open_watches += 1
            self._watches_started += 1
            self._lock.notify_all()

    def watch_closed(self) -> None:
        with self._lock:
            self._open_watches -= 1
            self._lock.notify_all()

    def connection_opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def connection_closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)
