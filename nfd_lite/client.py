"""A thin own-Node client on the official ``kubernetes`` client's raw ``ApiClient.call_api``.

``CoreV1Api`` would import some 250 model modules (about 20 MiB more resident memory) to hand back
objects this writer only reads three fields of, so requests go through ``call_api`` and JSON comes
back as dicts. Every request carries a timeout. Only the start-up self-check names another node, in a
list of one and a dry-run patch that the server never stores (``probe_other_node``). A failure is raised
as the ``apierrors`` class saying what it means.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

from nfd_lite.apierrors import ConnectionFailed, api_error, response_error
from nfd_lite.incluster import TokenFile

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "nfd-lite/0.1"
FIELD_MANAGER = "nfd-lite"
_NODES = "/api/v1/nodes"


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
        # Called on every answer of the API server (any HTTP response, each watch event or bookmark): how
        # the writer knows it is reachable (retry.Outage).
        self.heard: Callable[[], None] = lambda: None

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
        verb = "watch" if stream else "list" if path == _NODES else method.lower()
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
            self.heard()
            if 200 <= response.status < 300:
                if stream:
                    return response.response
                return json.loads(response.read())
            data = response.read()
            if response.status == 401 and attempt == 1 and self.token is not None:
                self.token.force(self.configuration)  # a rotated token: read it and try once more
                continue
            raise response_error(response.status, data, response.headers, verb=verb)
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

    def other_node(self) -> dict[str, Any] | None:
        """Some Node other than this one (None on a one-node cluster), for the self-check's probe."""
        query = [("fieldSelector", f"metadata.name!={self.node_name}"), ("limit", "1")]
        result = self._send("GET", _NODES, query=query)
        items = result.get("items") or []
        node: dict[str, Any] | None = items[0] if items else None
        return node

    def probe_other_node(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A dry-run merge patch of another Node, always with ``dryRun=All``: the server runs admission and
        stores nothing. The one request that names another node; nothing else may write one."""
        query = [("fieldManager", FIELD_MANAGER), ("dryRun", "All")]
        path = _NODES + "/" + quote(name, safe="")
        node: dict[str, Any] = self._send(
            "PATCH", path, query=query, body=dict(body), content_type=MERGE_PATCH
        )
        return node

    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"metadata.name={self.node_name}")

    def list_node(self) -> tuple[dict[str, Any] | None, str]:
        """The Node (None if it does not exist) and the list's resourceVersion to watch from."""
        result = self._send("GET", _NODES, query=[self._selector()])
        items = result.get("items") or []
        rv = str((result.get("metadata") or {}).get("resourceVersion") or "")
        node = items[0] if items else None
        if node is not None:
            node.setdefault("kind", "Node")
        return node, rv

    def watch(
        self, resource_version: str, timeout_seconds: int, *, silence: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Events of the own-node watch until the server ends it. Raises Gone when expired, and
        ConnectionFailed when nothing (not even a bookmark) arrives for ``silence`` seconds."""
        query = [
            self._selector(),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        # Connect quickly; let each read wait up to ``silence``, or as long as the server may keep the
        # watch open. A stream cut off without a FIN or RST (a dropped route, a policy dropping packets)
        # is then noticed.
        read = silence if silence is not None else timeout_seconds + 30.0
        response = self._send("GET", _NODES, query, timeout=(self.request_timeout, read), stream=True)
        self.current_watch = response
        try:
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    self.heard()
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
