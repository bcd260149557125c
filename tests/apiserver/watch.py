"""WATCH streams: newline-delimited JSON events in a chunked HTTP/1.1 response, as the real server sends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tests.apiserver.selectors import field_selector, label_selector
from tests.apiserver.status import status_body
from tests.apiserver.store import Event, TooOld

if TYPE_CHECKING:
    from tests.apiserver.resources import Kind
    from tests.apiserver.server import FakeApiServer

Send = Callable[[dict[str, Any]], bool]  # returns False once the client is gone


def gone_event(requested: str, current: int) -> dict[str, Any]:
    message = f"too old resource version: {requested} ({current})"
    return {"type": "ERROR", "object": status_body(410, message, "Expired")}


def _translate(event: Event, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The event as this watcher sees it through its selectors (leaving the selection is DELETED)."""
    now_in = match(event.obj)
    was_in = event.old is not None and match(event.old)
    if event.type == "DELETED":
        return {"type": "DELETED", "object": event.obj} if now_in or was_in else None
    if now_in:
        return {"type": "MODIFIED" if was_in else "ADDED", "object": event.obj}
    return {"type": "DELETED", "object": event.obj} if was_in else None


def stream(api: FakeApiServer, kind: Kind, query: dict[str, str], send: Send, force_gone: bool) -> bool:
    """Serve one watch until timeoutSeconds, a drop, server stop, or the client leaving.

    Returns True when the stream must end with a connection reset instead of its last chunk."""
    store = api.store
    fields, _ = field_selector(query.get("fieldSelector"))
    labels = label_selector(query.get("labelSelector"))

    def match(obj: dict[str, Any]) -> bool:
        return fields(obj) and labels(obj)

    requested = query.get("resourceVersion", "")
    deadline = time.monotonic() + min(
        float(query.get("timeoutSeconds") or api.watch_timeout), api.watch_timeout
    )
    bookmarks = query.get("allowWatchBookmarks") == "true"
    with store.cond:
        drop_generation, bookmark_generation = store.drop_generation, store.bookmark_generation
        current = store.rv
    if force_gone:
        send(gone_event(requested or str(current), current))
        return False
    initial: list[dict[str, Any]] = []
    if requested in ("", "0"):
        items, last = store.list_all(kind.resource)
        initial = [{"type": "ADDED", "object": o} for o in items if match(o)]
    else:
        try:
            last = int(requested)
            store.events_after(last)
        except (TooOld, ValueError):
            send(gone_event(requested, current))
            return False
    if not all(send(e) for e in initial):
        return False
    api.watch_opened()
    try:
        return _loop(api, kind, match, send, last, deadline, bookmarks, drop_generation, bookmark_generation)
    finally:
        api.watch_closed()


def _loop(
    api: FakeApiServer,
    kind: Kind,
    match: Callable[[dict[str, Any]], bool],
    send: Send,
    last: int,
    deadline: float,
    bookmarks: bool,
    drop_generation: int,
    bookmark_generation: int,
) -> bool:
    store = api.store
    next_bookmark = time.monotonic() + api.bookmark_interval
    while True:
        with store.cond:

            def ready(last: int = last, bookmark_generation: int = bookmark_generation) -> bool:
                return (
                    store.stopped
                    or store.drop_generation != drop_generation
                    or store.bookmark_generation != bookmark_generation
                    or bool(store.history and store.history[-1].rv > last)
                )

            store.cond.wait_for(ready, timeout=max(0.0, min(deadline, next_bookmark) - time.monotonic()))
            if store.stopped or store.drop_generation != drop_generation:
                return store.drop_generation != drop_generation and store.drop_with_reset
            try:
                pending = store.events_after(last)
            except TooOld:
                pending = None
            forced_bookmark = store.bookmark_generation != bookmark_generation
            bookmark_generation = store.bookmark_generation
            current = store.rv
        if pending is None:  # compacted while watching
            send(gone_event(str(last), current))
            return False
        for event in pending:
            last = event.rv
            if event.resource == kind.resource and (out := _translate(event, match)) and not send(out):
                return False
        now = time.monotonic()
        if bookmarks and (forced_bookmark or now >= next_bookmark):
            last = max(last, current)
            bookmark = {
                "kind": kind.kind,
                "apiVersion": _api_version(kind),
                "metadata": {"resourceVersion": str(last)},
            }
            if not send({"type": "BOOKMARK", "object": bookmark}):
                return False
        if now >= next_bookmark:
            next_bookmark = now + api.bookmark_interval
        if now >= deadline:
            return False


def _api_version(kind: Kind) -> str:
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"
