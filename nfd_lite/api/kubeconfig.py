"""The connection of a kubeconfig file's current context (``--kubeconfig``), read by the official
client's kubeconfig loader (exec credential plugins, OIDC, token files), which only this mode loads.

The official client's loader crashes on most mistakes in the file, or logs them and goes on without
credentials; the file is therefore checked first, so that every mistake is one ClientConfigError line
naming the file and the field.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nfd_lite.api.clientconfig import ClientConfigError, check_tls, server_problem
from nfd_lite.api.connection import Connection

if TYPE_CHECKING:
    from kubernetes.client.configuration import Configuration


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
    if problem := server_problem(cluster.get("server")):
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


class LoadedCredentials:
    """The credentials the loader set (``Credentials``): a token, static or from an exec plugin or OIDC,
    which the loader's own hook renews before it expires, or a username and password."""

    def __init__(self, config: Configuration) -> None:
        self.config = config

    def authorization(self) -> str | None:
        token = self.config.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            return str(token)
        if self.config.username or self.config.password:
            return str(self.config.get_basic_auth_token())
        return None

    def renew(self) -> None:
        """Nothing beyond what ``authorization`` does: the loader renews a credential when it expires."""


def kubeconfig_connection(path: Path) -> Connection:
    """The connection of ``path``'s current context. Every mistake in the file is one ClientConfigError
    line naming the file; the client's own loader would crash on most of them."""
    from kubernetes.client.configuration import Configuration
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
            check_tls((ca_what, config.ssl_ca_cert) if config.ssl_ca_cert else None, client)
        except ClientConfigError as err:
            raise ClientConfigError(f"{where}: {err}") from None
    return Connection(
        config.host,
        credentials=LoadedCredentials(config),
        ca_file=config.ssl_ca_cert,
        cert_file=config.cert_file,
        key_file=config.key_file,
        verify=bool(config.verify_ssl),
        server_name=getattr(config, "tls_server_name", None),
        proxy=config.proxy,
    )
