"""`helm test --logs`, as docs/deploy.md and the chart's README give it, with the real helm 3 and 4 against a
real kube-apiserver: a passing test exits 0 and prints the test pod's log.

No kubelet runs here, so the test plays the kubelet's two parts: it binds the test pod to a Node and
reports it Succeeded, and serves the kubelet's ``/containerLogs`` endpoint, which kube-apiserver calls for
``pods/log`` at the address and port the Node reports. Everything else (helm's hook handling and its log
fetch, the API server's log proxy) is the real thing.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.deploy.chart import HELMS
from tests.kube.controlplane import ControlPlane
from tests.kube.helm import TOOLS, create_namespace, install
from tests.waiting import eventually

NODE = "gpu-node"
LOG_LINE = f"node {NODE} carries nvidia.com/gpu.present=true"  # what the test pod's command prints


class FakeKubelet:
    """The kubelet's HTTPS log endpoint on loopback: answers ``/containerLogs/NS/POD/CONTAINER`` for the
    pods it was told ran, 404 (as the kubelet does) for any other; remembers every path asked for."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.logs: dict[str, str] = {}  # "NS/POD/CONTAINER" -> log text
        self.asked: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                owner.asked.append(path)
                text = owner.logs.get(path.removeprefix("/containerLogs/"))
                body = (text if text is not None else "not found").encode()
                self.send_response(200 if text is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # quiet: the test reports what matters
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("helm-test-logs")) as plane:
        yield plane


@pytest.fixture(scope="module")
def kubelet(cluster: ControlPlane) -> Iterator[FakeKubelet]:
    # kube-apiserver without --kubelet-certificate-authority does not verify the kubelet's certificate;
    # the API server's own pair serves.
    fake = FakeKubelet(cluster.ca, cluster.workdir / "apiserver.key")
    cluster.create_node(NODE, {"nvidia.com/gpu.present": "true"})
    status = {
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": fake.port}},
        }
    }
    cluster.must("PATCH", f"/api/v1/nodes/{NODE}/status", status, content_type="application/merge-patch+json")
    yield fake
    fake.close()


def run_as_kubelet(cluster: ControlPlane, kubelet: FakeKubelet, namespace: str, pod: str) -> None:
    """What the kubelet does for the test pod: it runs on NODE, prints its line and succeeds."""
    base = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    }
    cluster.must("POST", f"{base}/binding", binding)
    kubelet.logs[f"{namespace}/{pod}/check"] = LOG_LINE + "\n"
    done = {"status": {"phase": "Succeeded"}}
    cluster.must("PATCH", f"{base}/status", done, content_type="application/merge-patch+json")


@pytest.mark.parametrize("which", HELMS)
def test_helm_test_logs_prints_the_passing_pods_log(
    cluster: ControlPlane, kubelet: FakeKubelet, tmp_path: Path, which: str
) -> None:
    name = f"logs-{which}"  # release and namespace
    create_namespace(cluster, name, "restricted")
    done = install(which, cluster, tmp_path, name, name, {})
    assert done.returncode == 0, done.stderr
    pod = f"{name}-gpu-labeller-test-gpu-present"

    command = [str(TOOLS.helm(which)), "test", name, "-n", name, "--logs", "--timeout", "120s"]
    command += ["--kubeconfig", str(cluster.admin_kubeconfig)]
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HELM_CACHE_HOME": str(tmp_path / "cache")}
    env |= {"HELM_CONFIG_HOME": str(tmp_path / "config"), "HELM_DATA_HOME": str(tmp_path / "data")}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as helm:
        try:
            path = f"/api/v1/namespaces/{name}/pods/{pod}"
            created = eventually(lambda: cluster.request("GET", path).status == 200, timeout=90, interval=0.2)
            assert created, f"helm test created no pod {pod}"
            run_as_kubelet(cluster, kubelet, name, pod)
            out, err = helm.communicate(timeout=150)
        finally:
            if helm.poll() is None:
                helm.kill()
                helm.communicate()

    assert helm.returncode == 0, out + err
    assert "Phase:          Succeeded" in out
    assert f"POD LOGS: {pod}\n{LOG_LINE}\n" in out
    # The log was read from the pod that passed, and that pod is still there for `kubectl logs`.
    assert cluster.request("GET", f"/api/v1/namespaces/{name}/pods/{pod}").status == 200
    assert {p for p in kubelet.asked if p.startswith(f"/containerLogs/{name}/")} == {
        f"/containerLogs/{name}/{pod}/check"
    }
