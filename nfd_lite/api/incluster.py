"""The in-cluster client configuration: the API server the pod's environment names, and the pod's
service account (its CA and its projected token, which the kubelet rotates)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from nfd_lite.api.clientconfig import ClientConfigError, check_tls, server_problem
from nfd_lite.api.connection import Connection

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class TokenFile:
    """A projected service-account token (``Credentials``): the kubelet rotates it, so it is re-read
    whenever the file changes (checked on every request; a stat is cheap) and whenever the server
    answers 401."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self.token = ""

    def read(self) -> str:
        try:
            info = os.stat(self.path)
            self.token = self.path.read_text().strip()
        except OSError as err:
            raise ClientConfigError(f"cannot read service account token {self.path}: {err.strerror}") from err
        self._stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        return self.token

    def authorization(self) -> str:
        try:
            info = os.stat(self.path)
        except OSError:
            info = None  # keep the last token; the server will say if it is no longer good
        if info is not None and (info.st_ino, info.st_mtime_ns, info.st_size) != self._stamp:
            self.renew()
        return f"Bearer {self.token}"

    def renew(self) -> None:
        try:
            self.read()
        except ClientConfigError as err:
            log.warning("%s", err)


def in_cluster_connection(
    sa_dir: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] = os.environ
) -> Connection:
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host and not port:
        raise ClientConfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); pass --kubeconfig"
        )
    if not host or not port:
        unset, kept = ("HOST", "PORT") if not host else ("PORT", "HOST")
        raise ClientConfigError(
            f"KUBERNETES_SERVICE_{unset} is unset or empty but KUBERNETES_SERVICE_{kept} is set"
        )
    if not port.isdecimal() or not 0 < int(port) < 65536:
        raise ClientConfigError(f"KUBERNETES_SERVICE_PORT={port!r} is not a port number")
    if ":" in host:
        host = f"[{host}]"
    url = f"https://{host}:{port}"
    if server_problem(url) or urlsplit(url).port != int(port):
        raise ClientConfigError(
            f"KUBERNETES_SERVICE_HOST={environ['KUBERNETES_SERVICE_HOST']!r} is not a host"
        )
    ca = sa_dir / "ca.crt"
    check_tls((f"service account CA {ca}", str(ca)), None)
    token = TokenFile(sa_dir / "token")
    if not token.read():
        raise ClientConfigError(f"service account token {token.path} is empty")
    return Connection(url, credentials=token, ca_file=str(ca))
