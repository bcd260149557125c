"""HTTP/1.1 request handling: authentication, fault injection, authorization, routing, Status answers."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

from tests.apiserver import discovery, resources, watch
from tests.apiserver.auth import Attributes, UserInfo
from tests.apiserver.selectors import field_selector, label_selector
from tests.apiserver.status import ApiError, status_body

if TYPE_CHECKING:
    from tests.apiserver.server import FakeApiServer

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# What the real server says with these codes (priority and fairness, an overloaded or restarting server).
FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "Timeout: request did not complete within requested timeout - context deadline exceeded",
}


class RequestRecord(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    user: str | None  # None when the token was refused (401)


def request_attributes(method: str, path: str, query: dict[str, str]) -> tuple[Attributes, bool, str]:
    """RBAC attributes, whether it is a watch, and the name in the URL, as the real RequestInfo derives them.

    A list/watch whose fieldSelector pins metadata.name is authorized with that name, as on the real server.
    """
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return Attributes(verb=method.lower() if method != "GET" else "get", path=path), False, ""
    is_watch = query.get("watch") in ("true", "1")
    if rest[:1] == ["watch"]:
        rest, is_watch = rest[1:], True
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return Attributes(verb="get", path=path), False, ""
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        verb = "get" if name else ("watch" if is_watch else "list")
    else:
        verb = VERBS.get(method, method.lower())
        if verb == "delete" and not name:
            verb = "deletecollection"
    url_name = name
    if verb in ("list", "watch") and not name:
        name = _selected_name(query)
    return Attributes(verb, group, resource, sub, name, namespace), is_watch, url_name


def _selected_name(query: dict[str, str]) -> str:
    try:
        _, name = field_selector(query.get("fieldSelector"))
    except ApiError:
        return ""  # the selector error is reported once routed
    return name or ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    api: FakeApiServer  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read `requests` instead

    def setup(self) -> None:
        super().setup()
        self.api.connection_opened(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.api.connection_closed(self.connection)

    def do_GET(self) -> None:
        self._dispatch()

    do_PATCH = do_PUT = do_POST = do_DELETE = do_GET

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type")
        user: UserInfo | None = None
        try:
            user = self.api.tokens.authenticate(self.headers.get("Authorization"))
        except ApiError as err:
            self.api.record(RequestRecord(self.command, path, query, content_type, None))
            self._send_json(err.code, err.body(), err.headers)
            return
        self.api.record(RequestRecord(self.command, path, query, content_type, user.username))
        attrs, is_watch, name = request_attributes(self.command, path, query)
        fault = self.api.faults.take(self.command, path, is_watch)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.reset:
                self._reset()
                return
            if fault.status is not None:
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                details = {"retryAfterSeconds": fault.retry_after} if fault.retry_after is not None else None
                message = fault.message or FAULT_MESSAGES.get(fault.status, f"injected fault {fault.status}")
                self._send_json(fault.status, status_body(fault.status, message, details=details), headers)
                return
        try:
            self.api.rbac.check(user, attrs)
            gone = fault is not None and fault.gone
            self._route(path, query, user, attrs, name, is_watch, body, content_type or "", gone)
        except ApiError as err:
            self._send_json(err.code, err.body(), err.headers)
        except Exception as exc:  # a bug in the fake: answer 500 with the cause
            self._send_json(500, status_body(500, f"fake API server error: {type(exc).__name__}: {exc}"))

    def _route(
        self,
        path: str,
        query: dict[str, str],
        user: UserInfo,
        attrs: Attributes,
        name: str,
        is_watch: bool,
        body: bytes,
        content_type: str,
        force_gone: bool,
    ) -> None:
        if not attrs.is_resource:
            found = discovery.answer(self.api, path)
            if found is None:
                raise ApiError(404, "the server could not find the requested resource")
            if isinstance(found, str):
                self._send_text(200, found)
            else:
                self._send_json(200, found)
            return
        kind = resources.KINDS.get((attrs.api_group, attrs.resource))
        if kind is None or attrs.namespace or (attrs.subresource and attrs.subresource != "status"):
            raise ApiError(404, "the server could not find the requested resource")
        if attrs.subresource and kind.resource != "nodes":
            raise ApiError(404, "the server could not find the requested resource")
        ua = self.headers.get("User-Agent") or ""
        if self.command == "GET" and is_watch:
            if name:  # a watch on one object's path (legacy form) watches it by name
                query = query | {"fieldSelector": f"metadata.name={name}"}
            self._watch(kind, query, force_gone)
        elif self.command == "GET" and not name:
            self._send_json(200, resources.list_objects(self.api, kind, query))
        elif self.command == "GET":
            self._send_json(200, resources.get(self.api, kind, name))
        elif not kind.writable or not name:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        elif self.command == "PATCH":
            args = (self.api, kind, name, attrs.subresource, user, content_type, body, query, ua)
            self._send_json(200, resources.patch(*args))
        elif self.command == "PUT":
            self._send_json(
                200, resources.update(self.api, kind, name, attrs.subresource, user, body, query, ua)
            )
        elif self.command == "DELETE" and not attrs.subresource:
            obj = resources.get(self.api, kind, name)
            self.api.store.delete(kind.resource, name)
            self._send_json(200, obj)
        else:
            raise ApiError(405, "the server does not allow this method on the requested resource")

    def _watch(self, kind: resources.Kind, query: dict[str, str], force_gone: bool) -> None:
        field_selector(query.get("fieldSelector"))  # a bad selector is a 400 before the stream starts
        label_selector(query.get("labelSelector"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(event: dict[str, Any]) -> bool:
            data = watch.encode(event)
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                return True
            except OSError:
                return False

        if watch.stream(self.api, kind, query, send, force_gone):
            self._reset()
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def _reset(self) -> None:
        """Close the connection with a TCP reset and no answer."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    def _send_json(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self._send(code, data, "application/json", headers or {})

    def _send_text(self, code: int, text: str) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8", {})

    def _send(self, code: int, data: bytes, content_type: str, headers: dict[str, str]) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True
