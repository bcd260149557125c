"""A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager, built from
their pinned Go modules by ``scripts/peers/build.sh kubernetes`` (scripts/peers/kubernetes), on free loopback
ports.

It runs what a cluster runs for the label writer's purposes: authentication of pod-bound service-account
tokens (with the node-name and node-uid claims) and of client certificates (a kubelet's), the Node
authorizer and RBAC, the default admission plugins including ValidatingAdmissionPolicy plus NodeRestriction,
server-side validation and the watch cache. Of the controllers only the one that type-checks admission
policies runs; no kubelet, and no scheduler unless a test asks for one (``start_scheduler``): Nodes and Pods
are plain objects created here, which is all a TokenRequest needs."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.apiserver.tls import make_certificate
from tests.node.pki import Authority, Pair

ROOT = Path(__file__).resolve().parents[2]
BINARIES = ROOT / ".cache" / "peers" / "kubernetes"  # the newest release the chart claims
OLDEST_BINARIES = ROOT / ".cache" / "peers" / "kubernetes-1.30"  # the oldest (Chart.yaml kubeVersion)
KUBECTL = ROOT / ".cache" / "tools" / "bin" / "kubectl"
BUILD_HINT = "build them with scripts/install-tools.sh (or scripts/peers/build.sh kubernetes kubernetes-1.30)"
WRITER_NAMESPACE = "gpu-labeller"
WRITER_ACCOUNT = "nfd-lite"
ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(Exception):
    """The control plane could not be started (message carries the log tail)."""


PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_the_tests() -> None:
    """In the child before it runs: the kernel SIGKILLs it when the test process dies, however it dies (a
    SIGKILL included), so no API server or etcd outlives its run. The processes are spawned by the main
    thread, whose exit is the process's."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# The lines of a Go program's log that say why it died.
_FATAL = re.compile(r"(fatal error: |panic: |SIG[A-Z]+: |F\d{4} )")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def kubeconfig_document(server: str, ca: Path, user: dict[str, str]) -> dict[str, Any]:
    """A kubeconfig with one cluster (``server``, trusting ``ca``) and one user (a token, or a client
    certificate and key); JSON of it is valid YAML."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "test",
    }


class ApiResponse:
    def __init__(self, status: int, body: bytes, warnings: list[str] | None = None) -> None:
        self.status = status
        self.body = body
        # The response's Warning headers (admission warnings, deprecations), as the server sent them.
        self.warnings = warnings or []

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def message(self) -> str:
        try:
            return str(self.json().get("message", ""))
        except (ValueError, AttributeError):
            return self.body.decode("utf-8", "replace")


class ControlPlane:
    """``with ControlPlane(workdir) as kube:`` starts etcd and kube-apiserver and stops them at the end."""

    def __init__(
        self,
        workdir: Path,
        binaries: Path = BINARIES,
        *,
        controllers: tuple[str, ...] = (),
        audit_rules: tuple[dict[str, Any], ...] = (),
        profiling: bool = False,
    ) -> None:
        """``controllers``: kube-controller-manager controllers to run besides the policy status one (a
        fleet runs node-lifecycle-controller, which marks a Node whose Lease is not renewed NotReady).
        ``audit_rules``: audit policy rules matched before the catch-all Metadata rule (a Request level
        for the writes whose bodies a test reads, None for a fleet's heartbeats). ``profiling``: the
        server's /debug/pprof (its default; off unless a benchmark reads the server's heap)."""
        self.workdir = workdir
        self.binaries = binaries
        self.controllers = ("validatingadmissionpolicy-status-controller", *controllers)
        self.audit_rules = audit_rules
        self.profiling = profiling
        self.admin_token = "admin-" + os.urandom(16).hex()
        self.port = 0
        self.etcd_port = 0
        self._processes: list[subprocess.Popen[bytes]] = []
        self.apiserver: subprocess.Popen[bytes]
        self.ca = workdir / "apiserver.crt"
        self.client_ca = workdir / "client-ca"  # signs client certificates the server accepts (kubelets')
        self._client_authority: Authority
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.audit_log = workdir / "audit.log"
        self.logs = workdir  # one NAME.log per daemon

    # ---- lifecycle ----

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
            if not os.access(self.binaries / name, os.X_OK):
                raise ControlPlaneError(f"{self.binaries / name} is missing: {BUILD_HINT}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        make_certificate(self.workdir)
        self._client_authority = Authority(self.client_ca)
        sa_key, sa_pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        subprocess.run(["openssl", "genrsa", "-out", sa_key, "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", sa_key, "-pubout", "-out", sa_pub], check=True, capture_output=True
        )
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        self._start_etcd()
        self._start_apiserver(sa_key, sa_pub, tokens)
        self._write_kubeconfig(self.admin_kubeconfig, self.admin_token)
        self._start_controller_manager()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it until stop()
        process = subprocess.Popen(
            [str(self.binaries / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_the_tests,
        )
        log.close()
        self._processes.append(process)
        return process

    def _start_etcd(self) -> None:
        self.etcd_port, peer = free_port(), free_port()
        client, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        process = self._spawn(
            "etcd",
            [
                "--name=test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--unsafe-no-fsync",  # a test cluster: durability is not the point, speed is
                "--log-level=warn",
            ],
        )
        self._wait(process, "etcd", lambda: self._etcd_healthy())

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _start_apiserver(self, sa_key: Path, sa_pub: Path, tokens: Path) -> None:
        self.port = self.port or free_port()
        self.apiserver = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.workdir}",
                f"--tls-cert-file={self.ca}",
                f"--tls-private-key-file={self.workdir / 'apiserver.key'}",
                f"--token-auth-file={tokens}",
                f"--client-ca-file={self.client_ca / 'ca.crt'}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                # As clusters run them: the Node authorizer and NodeRestriction decide only for kubelets
                # (system:node:NAME in system:nodes), so no other identity sees a difference.
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-cluster-ip-range=10.96.0.0/24",
                # No kubelets or controllers run, so nothing should reconcile the `kubernetes` Service
                # endpoints to a loopback address (which validation would refuse on every attempt).
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",  # an event is on disk before the response: counts are exact
                f"--profiling={str(self.profiling).lower()}",
                "--v=1",
            ],
        )
        self._wait(self.apiserver, "kube-apiserver", lambda: self.request("GET", "/readyz").status == 200, 90)

    def _audit_policy(self) -> Path:
        path = self.workdir / "audit-policy.json"
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [*self.audit_rules, {"level": "Metadata"}],
        }
        path.write_text(json.dumps(policy))
        return path

    def requests(self, username: str | None = None) -> list[dict[str, Any]]:
        """Every request the server has answered (or, for a watch, started answering), oldest first, one
        entry each, as its audit log records them: verb, requestURI, user, userAgent, responseStatus."""
        seen: set[str] = set()
        events: list[dict[str, Any]] = []
        with contextlib.suppress(FileNotFoundError), open(self.audit_log) as log:
            for line in log:
                event = json.loads(line)
                if event["auditID"] in seen:
                    continue
                if username is not None and event["user"].get("username") != username:
                    continue
                seen.add(event["auditID"])
                events.append(event)
        return events

    def apply_policies(self, manifests: str) -> None:
        """``kubectl apply --server-side --force-conflicts`` of admission policies or bindings (YAML or JSON
        documents), as the tests' own field manager, then ``settle_policies``."""
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=gpu-labeller-tests", "-f", "-",
            stdin=manifests,
        )  # fmt: skip
        self.settle_policies()

    def settle_policies(self) -> None:
        """Call after changing an admission policy or binding, before the writer's token sends a request the
        policy evaluates. Below 1.37 kube-apiserver dies with a Go fatal error when a writer's request is
        evaluated while it compiles a changed policy (docs/deploy.md, "Changing the admission policy before
        Kubernetes 1.37"); it recompiles in a loop that runs each second, so three seconds let it finish
        first, as the documented pause does for a cluster. Every test still waits for the change to be
        enforced by probing."""
        time.sleep(3)

    def restart_apiserver(self) -> None:
        """Kill kube-apiserver and start it again on the same port and etcd, as a crash or an upgrade
        does: open watches break, and its watch cache starts afresh at the current resourceVersion."""
        self.apiserver.kill()  # a graceful stop waits for open watches to drain
        self.apiserver.wait(30)
        self._processes.remove(self.apiserver)
        self._start_apiserver(self.workdir / "sa.key", self.workdir / "sa.pub", self.workdir / "tokens.csv")

    def _start_controller_manager(self) -> None:
        """Only the controller that type-checks ValidatingAdmissionPolicies and writes their status (and
        those ``controllers`` asked for)."""
        process = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )
        time.sleep(0.5)
        if process.poll() is not None:
            log = _tail(self.logs / "kube-controller-manager.log")
            raise ControlPlaneError(f"kube-controller-manager exited with {process.returncode}:\n{log}")

    def start_scheduler(self) -> None:
        """Opt-in, for tests that let pods be placed by their selectors: the real kube-scheduler with its
        default profile, as admin, until stop(). No other test gets one (their pods name their node), and
        none is needed to run a pod: it is only bound. Returns once it has synced its informers (/readyz)."""
        if not os.access(self.binaries / "kube-scheduler", os.X_OK):
            raise ControlPlaneError(f"{self.binaries / 'kube-scheduler'} is missing: {BUILD_HINT}")
        port = free_port()
        process = self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={self.admin_kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",  # for /readyz only, which it serves to anyone
                f"--cert-dir={self.workdir / 'kube-scheduler'}",
                "--v=1",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # its own self-signed cert

        def ready() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=insecure, timeout=2) as r:
                return bool(r.status == 200)

        self._wait(process, "kube-scheduler", ready, 60)

    def _wait(self, process: subprocess.Popen[bytes], name: str, ready: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {process.returncode}:\n{_tail(self.logs / f'{name}.log')}"
                )
            with contextlib.suppress(OSError):
                if ready():
                    return
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} not ready in {timeout:.0f} s:\n{_tail(self.logs / f'{name}.log')}")

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._processes.clear()

    # ---- access ----

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _write_kubeconfig(self, path: Path, token: str) -> Path:
        path.write_text(json.dumps(kubeconfig_document(self.url, self.ca, {"token": token})))
        return path

    def kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig file for ``token`` (JSON is valid YAML)."""
        return self._write_kubeconfig(path, token)

    def client_certificate(self, user: str, groups: tuple[str, ...] = ()) -> Pair:
        """A client certificate the server authenticates as ``user`` in ``groups`` (CN and O, as a
        kubelet's: ``client_certificate("system:node:NAME", ("system:nodes",))``)."""
        subject = "".join(f"/O={group}" for group in groups) + f"/CN={user}"
        name = "client-" + hashlib.sha256(subject.encode()).hexdigest()[:16]
        return self._client_authority.issue(name, subject, usage="clientAuth")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        cert: Pair | None = None,
        content_type: str = "application/json",
    ) -> ApiResponse:
        """One raw HTTPS request (admin unless ``token`` or the client certificate ``cert``); HTTP errors
        are returned, not raised.

        The user agent names the server's default field manager: admin requests are "gpu-labeller-tests",
        token requests "nfd-lite", as the writer's own patches are (the admission policy tells the writer's
        managedFields entry from everyone else's by that name)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {
            "Accept": "application/json",
            "User-Agent": "gpu-labeller-tests/0" if token is None else "nfd-lite/0",
        }
        if cert is None:
            headers["Authorization"] = f"Bearer {token or self.admin_token}"
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        context = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            context.load_cert_chain(cert.cert, cert.key)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return ApiResponse(response.status, response.read(), response.headers.get_all("Warning"))
        except urllib.error.HTTPError as err:
            return ApiResponse(err.code, err.read(), err.headers.get_all("Warning"))
        except OSError:
            self._raise_if_apiserver_died(f"{method} {path}")
            raise

    def _raise_if_apiserver_died(self, during: str) -> None:
        """A refused or dropped connection is most often the server's own death (a Go fatal error is not a
        panic the server recovers from): say so with its exit status and the lines that tell why, rather
        than leave a bare ConnectionRefused for every later test to repeat."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.apiserver.wait(2)
        if self.apiserver.returncode is None:
            return
        log = self.logs / "kube-apiserver.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        first = next((i for i, line in enumerate(lines) if _FATAL.match(line)), None)
        why = lines[first : first + 25] if first is not None else lines[-30:]
        raise ControlPlaneError(
            f"kube-apiserver ({self.binaries.name}) exited with {self.apiserver.returncode} during {during}; "
            f"its log is {log}:\n" + "\n".join(why)
        )

    def must(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        response = self.request(method, path, body, **kwargs)
        if not 200 <= response.status < 300:
            raise AssertionError(f"{method} {path}: {response.status} {response.message}")
        return response.json()

    def kubectl(
        self, *args: str, token: str | None = None, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Real kubectl against this server, as admin unless ``token``; ``stdin`` for ``-f -``."""
        if not os.access(KUBECTL, os.X_OK):
            raise ControlPlaneError(f"{KUBECTL} is missing: run scripts/install-tools.sh")
        config = self.admin_kubeconfig
        if token is not None:
            config = self.kubeconfig(self.workdir / f"kubeconfig-{abs(hash(token))}", token)
        result = subprocess.run(
            [str(KUBECTL), f"--kubeconfig={config}", *args],
            capture_output=True,
            text=True,
            timeout=120,
            input=stdin,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.returncode}\n{result.stderr}")
        return result

    # ---- objects ----

    def create_node(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
        node: dict[str, Any] = self.must("POST", "/api/v1/nodes", body)
        return node

    def delete_node(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/nodes/{name}")

    def get_node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.must("GET", f"/api/v1/nodes/{name}")
        return node

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.get_node(name)["metadata"].get("labels") or {})

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.get_node(name)["metadata"].get("annotations") or {})

    def patch_node(
        self, name: str, patch: dict[str, Any], *, token: str | None = None, cert: Pair | None = None
    ) -> ApiResponse:
        return self.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            patch,
            token=token,
            cert=cert,
            content_type="application/merge-patch+json",
        )

    def ensure_namespace(self, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        response = self.request("POST", "/api/v1/namespaces", body)
        if response.status not in (201, 409):
            raise AssertionError(f"namespace {name}: {response.status} {response.message}")

    def ensure_service_account(self, namespace: str, name: str) -> None:
        self.ensure_namespace(namespace)
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        response = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body)
        if response.status not in (201, 409):
            raise AssertionError(f"service account {name}: {response.status} {response.message}")

    def pod_token(
        self,
        node: str,
        *,
        namespace: str = WRITER_NAMESPACE,
        account: str = WRITER_ACCOUNT,
        bind_pod: bool = True,
        seconds: int = 3600,
    ) -> str:
        """A service-account token as the kubelet would mount it: bound to a Pod scheduled on ``node``, so
        it carries the real ``authentication.kubernetes.io/node-name`` and ``node-uid`` claims. With
        ``bind_pod=False`` the token is bound to nothing (no node claims), as a long-lived token would be."""
        self.ensure_service_account(namespace, account)
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if bind_pod:
            pod_name = f"{account}-{node}-{os.urandom(3).hex()}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "nfd-lite", "image": "registry.invalid/nfd-lite:test"}],
                },
            }
            created = self.must("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name,
                "uid": created["metadata"]["uid"],
            }
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        answer = self.must("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", request)
        return str(answer["status"]["token"])

    def in_cluster(self, directory: Path, token: str) -> tuple[Path, dict[str, str]]:
        """The files and environment a pod gets: token, ca.crt and namespace in ``directory``, and
        KUBERNETES_SERVICE_HOST/PORT pointing here."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(token)
        shutil.copy(self.ca, directory / "ca.crt")
        (directory / "namespace").write_text(WRITER_NAMESPACE)
        return directory, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def compact(self) -> None:
        """Compact etcd at its current revision, so watches from older resourceVersions get 410 Gone."""
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        with urllib.request.urlopen(
            urllib.request.Request(f"{base}/kv/range", b'{"key":"AA=="}'), timeout=5
        ) as r:
            revision = int(json.loads(r.read())["header"]["revision"])
        body = json.dumps({"revision": revision, "physical": True}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{base}/kv/compaction", body), timeout=10):
            pass
