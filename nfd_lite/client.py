"""A thin own-Node client on the official ``kubernetes`` client's raw ``ApiClient.call_api``.

``CoreV1Api`` would import some 250 model modules (about 20 MiB more resident memory) to hand back
objects this writer only reads three fields of, so requests go through ``call_api`` and JSON comes
back as dicts. Every request carries a timeout; no request ever names another node.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "nfd-lite/0.1"


class ConfigError(Exception):
    """The client cannot be configured (one line for the user)."""


class ApiError(Exception):
    """A failed request: ``status`` is the HTTP code, 0 for connection errors and timeouts."""

    def __init__(self, status: int, message: str, retry_after: float | None = None, verb: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.verb = verb  # the Kubernetes verb of the failed request: get, list, watch or patch

    @property
    def code(self) -> str:
        """Metric label: the HTTP code, or "connection"."""
        return str(self.status) if self.status else "connection"


class TokenFile:
    """A projected service-account token: the kubelet rotates it, so it is re-read whenever the file
    changes (checked on every request; a stat is cheap) and whenever the server answers 401."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self.token = ""

    def read(self) -> str:
        try:
            info = os.stat(self.path)
            self.token = self.path.read_text().strip()
        except OSError as err:
            raise ConfigError(f"cannot read service account token {self.path}: {err.strerror}") from err
        self._stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        return self.token

    def refresh(self, configuration: Configuration) -> None:
        try:
            info = os.stat(self.path)
        except OSError:
            return  # keep the last token; the server will say if it is no longer good
        if (info.st_ino, info.st_mtime_ns, info.st_size) != self._stamp:
            self.force(configuration)

    def force(self, configuration: Configuration) -> None:
        try:
            configuration.api_key["BearerToken"] = self.read()
        except ConfigError as err:
            log.warning("%s", err)


def in_cluster_configuration(
    sa_dir: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] = os.environ
) -> tuple[Configuration, TokenFile]:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); pass --kubeconfig")
    if ":" in host:
        host = f"[{host}]"
    config = Configuration()
    config.host = f"https://{host}:{port}"
    config.ssl_ca_cert = str(sa_dir / "ca.crt")
    token = TokenFile(sa_dir / "token")
    config.api_key["BearerToken"] = token.read()
    config.api_key_prefix["BearerToken"] = "Bearer"
    config.refresh_api_key_hook = token.refresh  # type: ignore[assignment]
    return config, token


def kubeconfig_configuration(path: Path) -> Configuration:
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import load_kube_config

    config = Configuration()
    try:
        load_kube_config(config_file=str(path), client_configuration=config)
    except (ConfigException, OSError, ValueError) as err:
        raise ConfigError(f"--kubeconfig {path}: {err}") from err
    return config


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return max(0.0, float(headers.get("Retry-After", "")))
    except ValueError:
        return None


def _status_message(status: int, data: bytes) -> str:
    try:
        body = json.loads(data)
        message = str(body.get("message") or body.get("reason") or "")
    except (ValueError, AttributeError):
        message = data[:200].decode("utf-8", "replace")
    return message or f"HTTP {status}"


class NodeApi:
    """GET/PATCH/LIST/WATCH of one Node. Retries live in the caller; this only classifies failures."""

    def __init__(
        self,
        configuration: Configuration,
        node_name: str,
        *,
        request_timeout: float = 10.0,
        token: TokenFile | None = None,
    ) -> None:
        configuration.retries = False  # urllib3 must not retry behind our back: retries are counted here
        configuration.keep_alive = True  # TCP keep-alive probes find a dead peer under an idle watch
        self.configuration = configuration
        self.api = ApiClient(configuration)
        self.api.user_agent = USER_AGENT
        self.node_name = node_name
        self.request_timeout = request_timeout
        self.token = token
        self._path = "/api/v1/nodes/" + quote(node_name, safe="")
        self.current_watch: Any = None

    def abort_watch(self) -> None:
        """Unblock a watch read from another thread (used on shutdown)."""
        response = self.current_watch
        if response is not None:
            try:
                getattr(response, "shutdown", response.close)()
            except Exception as err:  # best effort while stopping
                log.debug("closing the watch: %s", err)

    def close(self) -> None:
        self.api.rest_client.close()

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        headers = {"Accept": "application/json"}
        verb = method.lower() if path == self._path else "watch" if stream else "list"
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            request = self.api.param_serialize(
                method,
                path,
                query_params=query,
                header_params=dict(headers),
                body=body,
                auth_settings=["BearerToken"],
            )
            try:
                response = self.api.call_api(*request, _request_timeout=timeout or self.request_timeout)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                raise ApiError(0, f"{method} {path}: {type(err).__name__}: {err}", verb=verb) from err
            if 200 <= response.status < 300:
                if stream:
                    return response.response
                return json.loads(response.read())
            data = response.read()
            if response.status == 401 and attempt == 1 and self.token is not None:
                self.token.force(self.configuration)  # a rotated token: read it and try once more
                continue
            raise ApiError(
                response.status,
                _status_message(response.status, data),
                _retry_after(response.headers) if response.status in (429, 503) else None,
                verb,
            )
        raise AssertionError("unreachable")

    def get_node(self) -> dict[str, Any]:
        node: dict[str, Any] = self._send("GET", self._path)
        return node

    def patch_node(self, body: Mapping[str, Any]) -> dict[str, Any]:
        node: dict[str, Any] = self._send("PATCH", self._path, body=dict(body), content_type=MERGE_PATCH)
        return node

    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"metadata.name={self.node_name}")

    def list_node(self) -> tuple[dict[str, Any] | None, str]:
        """The Node (None if it does not exist) and the list's resourceVersion to watch from."""
        result = self._send("GET", "/api/v1/nodes", query=[self._selector()])
        items = result.get("items") or []
        rv = str((result.get("metadata") or {}).get("resourceVersion") or "")
        node = items[0] if items else None
        if node is not None:
            node.setdefault("kind", "Node")
        return node, rv

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """Events of the own-node watch until the server ends it. Raises ApiError(410) when expired."""
        query = [
            self._selector(),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        # Connect quickly; allow the read to wait as long as the server may keep the watch open.
        response = self._send(
            "GET", "/api/v1/nodes", query, timeout=(self.request_timeout, timeout_seconds + 30.0), stream=True
        )
        self.current_watch = response
        try:
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            int(status.get("code") or 500), str(status.get("message") or "watch error")
                        )
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ApiError(0, f"watch: {type(err).__name__}: {err}") from err
        except ValueError as err:
            raise ApiError(0, f"watch: undecodable event: {err}") from err
        finally:
            response.release_conn()


def explain(err: ApiError) -> str:
    """One clear line for 401/403: which credential or permission is missing, or which policy refused."""
    if err.status == 401:
        return (
            "the API server rejected the credentials (401): the service account token is missing, expired "
            f"or revoked; the token file is re-read on every retry ({err.message})"
        )
    if "ValidatingAdmissionPolicy" in err.message or "admission" in err.message.lower():
        return (
            f"an admission policy refused the {err.verb or 'request'} of this node (403): it may only change "
            f"labels under the allowed prefixes and the ownership annotation of its own node ({err.message})"
        )
    return (
        f"permission denied (403): the service account needs '{err.verb}' on core 'nodes' for this node; "
        f"check ClusterRole/ClusterRoleBinding gpu-labeller-nfd-lite ({err.message})"
    )
