"""A thin own-Node client on the official ``kubernetes`` client's raw ``ApiClient.call_api``.

``CoreV1Api`` would import some 250 model modules (about 20 MiB more resident memory) to hand back
objects this writer only reads three fields of, so requests go through ``call_api`` and JSON comes
back as dicts. Every request carries a timeout; no request ever names another node.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3
import yaml
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "nfd-lite/0.1"
FIELD_MANAGER = "nfd-lite"


class ClientConfigError(Exception):
    """The client cannot be configured (one line for the user)."""


class ApiError(Exception):
    """A failed request: ``status`` is the HTTP code, 0 for connection errors and timeouts. Callers tell
    failures apart by subclass (what the failure means), never by comparing ``status``."""

    def __init__(self, status: int, message: str, retry_after: float | None = None, verb: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after  # seconds the server asked us to wait (429, 503), if it said
        self.verb = verb  # the Kubernetes verb of the failed request: get, list, watch or patch

    @property
    def code(self) -> str:
        """Metric label: the HTTP code, or "connection"."""
        return str(self.status) if self.status else "connection"


class ConnectionFailed(ApiError):
    """No answer: the connection failed or timed out, or a watch stream broke off (status 0)."""


class AccessDenied(ApiError):
    """401 or 403: a credential or permission is missing, which retrying alone does not fix."""


class Unauthorized(AccessDenied):
    """401: the server did not accept the credentials."""


class Forbidden(AccessDenied):
    """403: RBAC or an admission policy refused the request."""


class NotFound(ApiError):
    """404: the Node does not exist."""


class Conflict(ApiError):
    """409: the Node changed since it was read (the patch carried a stale resourceVersion)."""


class Gone(ApiError):
    """410: the watch's resourceVersion is too old to resume from; list again."""


class Throttled(ApiError):
    """429: too many requests; ``retry_after`` says how long to wait, when the server said."""


class ServerError(ApiError):
    """5xx: the server (or something in front of it) failed."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: Throttled,
}


def api_error(status: int, message: str, retry_after: float | None = None, verb: str = "") -> ApiError:
    """The ApiError subclass saying what ``status`` means."""
    if status == 0:
        kind: type[ApiError] = ConnectionFailed
    elif status >= 500:
        kind = ServerError
    else:
        kind = _BY_STATUS.get(status, ApiError)
    return kind(status, message, retry_after, verb)


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
            raise ClientConfigError(f"cannot read service account token {self.path}: {err.strerror}") from err
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
        except ClientConfigError as err:
            log.warning("%s", err)


def _tls_problem(err: OSError, expected: str) -> str:
    if isinstance(err, ssl.SSLError):  # e.g. reason NO_CERTIFICATE_OR_CRL_FOUND, KEY_VALUES_MISMATCH
        reason = (err.reason or str(err)).lower().replace("_", " ")
        return f"not {expected} ({reason})"
    return err.strerror or str(err)


def _check_tls(ca: tuple[str, str] | None, client: tuple[str, str, str] | None) -> None:
    """Load the CA bundle and client certificate now, as the first HTTPS connection would, so that a bad
    file is a start-up error naming it instead of a connection error retried for ever. ``ca`` is
    (what, file); ``client`` is (what, certificate file, key file)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # without the system CAs: only the files are checked
    if ca is not None:
        what, path = ca
        try:
            context.load_verify_locations(cafile=path)
        except OSError as err:
            raise ClientConfigError(f"{what}: {_tls_problem(err, 'a PEM CA certificate')}") from None
    if client is not None:
        what, cert, key = client
        try:
            context.load_cert_chain(cert, key)
        except OSError as err:
            raise ClientConfigError(
                f"{what}: {_tls_problem(err, 'a matching PEM certificate and key')}"
            ) from None


def _server_problem(url: object) -> str | None:
    """Why ``url`` cannot address an API server, or None."""
    if not isinstance(url, str) or not url:
        return "no server URL"
    try:
        urlsplit(url)  # the client's Configuration parses it so too, and raises on odd brackets
        parsed = urllib3.util.parse_url(url)
    except (ValueError, urllib3.exceptions.LocationParseError):
        return f"server {url!r} is not a URL"
    if parsed.scheme not in ("https", "http") or not parsed.host:
        return f"server {url!r} is not an https://host[:port] URL"
    return None


def in_cluster_configuration(
    sa_dir: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] = os.environ
) -> tuple[Configuration, TokenFile]:
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
    if _server_problem(url) or urllib3.util.parse_url(url).port != int(port):
        raise ClientConfigError(
            f"KUBERNETES_SERVICE_HOST={environ['KUBERNETES_SERVICE_HOST']!r} is not a host"
        )
    config = Configuration()
    config.host = url
    ca = sa_dir / "ca.crt"
    _check_tls((f"service account CA {ca}", str(ca)), None)
    config.ssl_ca_cert = str(ca)
    token = TokenFile(sa_dir / "token")
    if not token.read():
        raise ClientConfigError(f"service account token {token.path} is empty")
    config.api_key["BearerToken"] = token.token
    config.api_key_prefix["BearerToken"] = "Bearer"
    config.refresh_api_key_hook = token.refresh  # type: ignore[assignment]
    return config, token


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ClientConfigError(f"cannot read it: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ClientConfigError(f"not UTF-8 text (byte {err.start}: {err.reason})") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ClientConfigError(f"not valid YAML: {err.problem or err.context}{where}") from None
    except yaml.reader.ReaderError as err:  # control characters
        raise ClientConfigError(f"not valid YAML: {err.reason} (character {err.position})") from None
    except yaml.YAMLError as err:
        raise ClientConfigError(f"not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        raise ClientConfigError("the file is empty")
    if not isinstance(data, dict):
        raise ClientConfigError(f"expected a kubeconfig mapping at the top level, got {type(data).__name__}")
    return data


def _named(document: dict[str, Any], section: str, name: object) -> dict[str, Any] | None:
    """The body of entry ``name`` of ``section`` (contexts, clusters, users), None when there is no such
    entry; checked the way the client's loader indexes it, which it does without looking first."""
    kind = section[:-1]
    entries = document.get(section)
    if entries is None and section == "users":
        return None
    if not isinstance(entries, list):
        raise ClientConfigError(f"'{section}' is missing or not a list")
    if not all(isinstance(entry, dict) and "name" in entry for entry in entries):
        raise ClientConfigError(f"every entry of '{section}' needs a 'name'")
    found = [entry for entry in entries if entry["name"] == name]
    if not found:
        return None
    if len(found) > 1:
        raise ClientConfigError(f"{kind} {name!r} is in '{section}' more than once")
    body = found[0].get(kind)
    if not isinstance(body, dict):
        raise ClientConfigError(f"{kind} {name!r} has no '{kind}' mapping")
    return body


def _required(document: dict[str, Any], section: str, name: object, named_by: str) -> dict[str, Any]:
    body = _named(document, section, name)
    if body is None:
        raise ClientConfigError(f"{section[:-1]} {name!r} named by {named_by} is not in '{section}'")
    return body


def _check_sources(body: dict[str, Any], owner: str, base: Path, *keys: str) -> None:
    """Each credential is inline (``KEY-data``, base64) or a file (``KEY``, relative to the kubeconfig's
    directory), the inline one winning, as the loader reads them; checked here so a mistake names its
    field rather than surfacing as a bare decoding error or a missing temporary file."""
    for key in keys:
        if f"{key}-data" in body:
            if body[f"{key}-data"] is None:
                raise ClientConfigError(f"{owner}: {key}-data is empty")
            try:
                base64.standard_b64decode(body[f"{key}-data"])  # as leniently as the loader
            except (TypeError, ValueError):
                raise ClientConfigError(f"{owner}: {key}-data is not base64") from None
        elif key in body:
            if not isinstance(body[key], str):
                raise ClientConfigError(f"{owner}: {key} is not a file name")
            if not (base / body[key]).is_file():
                raise ClientConfigError(f"{owner}: {key} {base / body[key]}: missing or not a file")


def _check_kubeconfig(document: dict[str, Any], base: Path) -> tuple[str, dict[str, Any], str]:
    """The current context's cluster name and cluster, and its user's name ("" when it names none)."""
    current = document.get("current-context")
    if not current or not isinstance(current, str):
        raise ClientConfigError("no current-context")
    context = _required(document, "contexts", current, "current-context")
    cluster_name = context.get("cluster")
    if not cluster_name or not isinstance(cluster_name, str):
        raise ClientConfigError(f"context {current!r} names no cluster")
    cluster = _required(document, "clusters", cluster_name, f"context {current!r}")
    if problem := _server_problem(cluster.get("server")):
        raise ClientConfigError(f"cluster {cluster_name!r}: {problem}")
    _check_sources(cluster, f"cluster {cluster_name!r}", base, "certificate-authority")
    user_name = context.get("user") or ""
    # A user the file does not define means no credentials, for the loader as for kubectl.
    if user_name and (user := _named(document, "users", user_name)) is not None:
        _check_sources(user, f"user {user_name!r}", base, "client-certificate", "client-key")
    return cluster_name, cluster, str(user_name)


class _LoaderErrors(logging.Filter):
    """Takes the errors the client's loader logs on the root logger instead of raising them (a failed
    exec credential plugin), which would otherwise show as a log line and then as 401s."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            self.messages.append(record.getMessage())
            return False
        return True


def kubeconfig_configuration(path: Path) -> Configuration:
    """The client configuration of ``path``'s current context. Every mistake in the file is one
    ClientConfigError line naming the file; the client's own loader would crash on most of them."""
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader

    where, base = f"--kubeconfig {path}", path.absolute().parent
    try:
        document = _read_kubeconfig(path)
        cluster_name, cluster, user_name = _check_kubeconfig(document, base)
    except ClientConfigError as err:
        raise ClientConfigError(f"{where}: {err}") from None
    config = Configuration()
    loader_errors = _LoaderErrors()
    logging.getLogger().addFilter(loader_errors)  # a logger's filter sees only records logged on it
    try:
        # No config_persister: the loader must never rewrite the user's file (it would after a token refresh).
        KubeConfigLoader(document, config_base_path=str(base)).load_and_set(config)
    except ConfigException as err:
        raise ClientConfigError(f"{where}: {str(err).removeprefix('Invalid kube-config file. ')}") from None
    except OSError as err:  # e.g. a tokenFile or certificate file it could not read
        raise ClientConfigError(
            f"{where}: cannot read {err.filename or 'a file it names'}: {err.strerror or err}"
        ) from None
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        # What the checks above do not foresee (auth-provider and exec sections, token files): the loader
        # reports it as whatever its indexing raised.
        raise ClientConfigError(f"{where}: malformed kubeconfig ({type(err).__name__}: {err})") from None
    finally:
        logging.getLogger().removeFilter(loader_errors)
    if loader_errors.messages:
        problem = loader_errors.messages[0].removeprefix("exec: ")
        raise ClientConfigError(f"{where}: user {user_name!r}: exec credential plugin failed: {problem}")
    if config.host.startswith("https:"):
        ca_what = f"cluster {cluster_name!r}: certificate-authority"
        if not cluster.get("certificate-authority-data"):
            ca_what += f" {config.ssl_ca_cert}"
        client = None
        if config.cert_file and config.key_file:
            client = (f"user {user_name!r}: client certificate/key", config.cert_file, config.key_file)
        try:
            _check_tls((ca_what, config.ssl_ca_cert) if config.ssl_ca_cert else None, client)
        except ClientConfigError as err:
            raise ClientConfigError(f"{where}: {err}") from None
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
        configuration.retries = False  # urllib3 must not retry behind our back: the caller retries and counts
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
                raise ConnectionFailed(0, f"{method} {path}: {type(err).__name__}: {err}", verb=verb) from err
            if 200 <= response.status < 300:
                if stream:
                    return response.response
                return json.loads(response.read())
            data = response.read()
            if response.status == 401 and attempt == 1 and self.token is not None:
                self.token.force(self.configuration)  # a rotated token: read it and try once more
                continue
            raise api_error(
                response.status,
                _status_message(response.status, data),
                _retry_after(response.headers) if response.status in (429, 503) else None,
                verb,
            )
        raise AssertionError("unreachable")

    def get_node(self) -> dict[str, Any]:
        node: dict[str, Any] = self._send("GET", self._path)
        return node

    def patch_node(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """A merge patch; with ``dry_run`` the server runs admission and validation but stores nothing."""
        # The field manager is named explicitly (not derived from the user agent): the admission policy
        # tells the writer's own managedFields entry from everyone else's by this name.
        query = [("fieldManager", FIELD_MANAGER)] + ([("dryRun", "All")] if dry_run else [])
        node: dict[str, Any] = self._send(
            "PATCH", self._path, query=query, body=dict(body), content_type=MERGE_PATCH
        )
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
        """Events of the own-node watch until the server ends it. Raises Gone when expired."""
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
                        code = int(status.get("code") or 500)
                        raise api_error(code, str(status.get("message") or "watch error"), verb="watch")
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ConnectionFailed(0, f"watch: {type(err).__name__}: {err}", verb="watch") from err
        except ValueError as err:
            raise ConnectionFailed(0, f"watch: undecodable event: {err}", verb="watch") from err
        finally:
            response.release_conn()


def explain(err: AccessDenied) -> str:
    """One clear line for 401/403: which credential or permission is missing, or which policy refused."""
    if isinstance(err, Unauthorized):
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
