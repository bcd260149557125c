"""A real OCI registry for the test node: distribution's registry (scripts/peers/build.sh registry) serving
TLS with a certificate from a CA of its own, inside the node's network namespace on 127.0.0.1:PORT, and the
same address on the host's loopback (a Forwarder), so that what is pushed from here and what containerd pulls
there carry one name. Nothing trusts its CA unless told: containerd through a hosts.toml in its config_path,
helm and buildah through their CA-file options."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.kube.controlplane import ROOT
from tests.node.cluster import NodeCluster
from tests.node.namespaces import Forwarder
from tests.node.pki import Authority
from tests.waiting import eventually

REGISTRY = ROOT / ".cache" / "peers" / "registry" / "registry"
OCI_TYPES = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"
# The combined log format of the registry's access log: client, request line, status, size, referer, agent.
_ACCESS = re.compile(r'^\S+ \S+ \S+ \[[^]]+\] "(\w+) (\S+) [^"]*" (\d{3}) \S+ "[^"]*" "([^"]*)"$')

CONFIG = """version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: {data}
  delete:
    enabled: false
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {cert}
    key: {key}
"""


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int
    agent: str


class Registry:
    """``with Registry(cluster) as registry:``; ``registry.host`` is HOST:PORT, ``registry.ca`` its CA."""

    def __init__(self, cluster: NodeCluster) -> None:
        self.cluster = cluster
        self.directory = cluster.workdir / "registry"
        self.log = cluster.logs / "registry.log"
        self._forwarder: Forwarder | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.host = ""
        self.ca = self.directory / "pki" / "ca.crt"

    def __enter__(self) -> Registry:
        if not REGISTRY.exists():
            raise AssertionError(f"{REGISTRY} is missing: run scripts/install-tools.sh")
        authority = Authority(self.directory / "pki")
        pair = authority.issue("registry", "/CN=registry", usage="serverAuth", names=["IP:127.0.0.1"])
        self._forwarder = Forwarder(self.cluster.namespaces, ("127.0.0.1", 0))
        port = self._forwarder.port
        self.host = f"127.0.0.1:{port}"
        config = self.directory / "config.yml"
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        config.write_text(
            CONFIG.format(data=self.directory / "data", port=port, cert=pair.cert, key=pair.key)
        )
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(
                [
                    *self.cluster.namespaces.enter,
                    "env",
                    "OTEL_TRACES_EXPORTER=none",
                    str(REGISTRY),
                    "serve",
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if not eventually(self._answers, 30, interval=0.5):
            self.__exit__(None, None, None)
            raise AssertionError(
                f"the registry did not answer on {self.host}:\n{self.log.read_text()[-2000:]}"
            )
        return self

    def _answers(self) -> bool:
        """GET /v2/ over TLS with the registry's CA: what every client asks first."""
        assert self._process is not None
        if self._process.poll() is not None:
            raise AssertionError(
                f"the registry exited {self._process.returncode}:\n{self.log.read_text()[-2000:]}"
            )
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(f"https://{self.host}/v2/", context=context, timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def __exit__(self, *_: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(15)
        if self._forwarder is not None:
            self._forwarder.close()

    def _call(self, method: str, path: str, body: bytes | None = None, media_type: str = "") -> Any:
        """``method`` https://HOST``path``, trusting the registry's CA; the answer, for the caller to read."""
        request = urllib.request.Request(f"https://{self.host}{path}", data=body, method=method)
        if media_type:
            request.add_header("Content-Type" if body is not None else "Accept", media_type)
        context = ssl.create_default_context(cafile=str(self.ca))
        return urllib.request.urlopen(request, context=context, timeout=30)

    def change_manifest(self, repository: str, tag: str, annotations: dict[str, str]) -> str:
        """Pushes again under ``tag`` the OCI manifest or index it names, ``annotations`` added, as anyone who
        may push could change a release after it was signed; the new digest."""
        with self._call("GET", f"/v2/{repository}/manifests/{tag}", media_type=OCI_TYPES) as answer:
            manifest = json.load(answer)
            media_type = answer.headers["Content-Type"]
        manifest["annotations"] = {**manifest.get("annotations", {}), **annotations}
        body = json.dumps(manifest).encode()
        with self._call("PUT", f"/v2/{repository}/manifests/{tag}", body, media_type) as answer:
            return str(answer.headers["Docker-Content-Digest"])

    def requests(self) -> list[Request]:
        """Every request the registry answered, from its access log, in order."""
        found = []
        for line in self.log.read_text().splitlines():
            if match := _ACCESS.match(line):
                method, path, status, agent = match.groups()
                found.append(Request(method, path, int(status), agent))
        return found


def trust_in_containerd(cluster: NodeCluster, host: str, hosts_toml: str, ca: Path) -> Path:
    """``hosts_toml`` as a node's admin writes it for ``host``, into containerd's config_path, with the CA
    certificate beside it. Returns the file written."""
    directory = cluster.registry_hosts / host
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.read_bytes())
    path = directory / "hosts.toml"
    path.write_text(hosts_toml)
    return path
