"""The test node's certificates, made with the openssl command: one CA signs the API server's serving
certificate (reachable as 127.0.0.1, the node IP, the `kubernetes` Service IP and its DNS names), the API
server's client certificate towards the kubelet, the kubelet's client and serving certificates, and the
admin's. As kubeadm lays them out, minus etcd's (etcd listens inside the private namespace only)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_ARGS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
DAYS = "2"  # a test cluster lives minutes


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


class Authority:
    """A CA in ``directory``; ``issue`` signs certificates with it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = Pair(directory / "ca.crt", directory / "ca.key")
        directory.mkdir(parents=True, exist_ok=True)
        _openssl(
            "req", "-x509", *KEY_ARGS, "-keyout", self.ca.key, "-out", self.ca.cert, "-days", DAYS,
            "-subj", "/CN=gpu-labeller-test-node-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip

    def issue(self, name: str, subject: str, *, usage: str, names: list[str] | None = None) -> Pair:
        """``usage``: serverAuth or clientAuth; ``names``: subjectAltName entries (IP:..., DNS:...)."""
        pair = Pair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        csr, extensions = self.directory / f"{name}.csr", self.directory / f"{name}.ext"
        lines = [f"extendedKeyUsage={usage}"]
        if names:
            lines.append("subjectAltName=" + ",".join(names))
        extensions.write_text("\n".join(lines) + "\n")
        _openssl("req", "-new", *KEY_ARGS, "-keyout", pair.key, "-out", csr, "-subj", subject)
        _openssl(
            "x509", "-req", "-in", csr, "-CA", self.ca.cert, "-CAkey", self.ca.key, "-CAcreateserial",
            "-days", DAYS, "-out", pair.cert, "-extfile", extensions,
        )  # fmt: skip
        return pair


def service_account_keys(directory: Path) -> Pair:
    """The key pair the API server signs service-account tokens with (``cert`` is the public key)."""
    pair = Pair(directory / "sa.pub", directory / "sa.key")
    _openssl("genrsa", "-out", pair.key, "2048")
    _openssl("rsa", "-in", pair.key, "-pubout", "-out", pair.cert)
    return pair
