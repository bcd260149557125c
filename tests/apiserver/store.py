"""Objects, the global resourceVersion, and the event history that watches replay.

One lock guards everything; a Condition wakes watch streams on every change, on drops and on stop.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

from tests.apiserver.objects import clone, now

HISTORY_LIMIT = 1000


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


class TooOld(Exception):
    """The requested resourceVersion is older than the history kept (etcd compaction): 410 Gone."""


class Store:
    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.rv = 1
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"nodes": {}, "runtimeclasses": {}}
        self.history: list[Event] = []
        self.oldest_rv = 1  # watches from a resourceVersion below this are answered 410
        self.drop_generation = 0  # bumped to end every open watch stream
        self.drop_with_reset = False  # whether the last drop ends streams with a TCP reset
        self.bookmark_generation = 0  # bumped to make every open watch send a BOOKMARK now
        self.stopped = False

    def get(self, resource: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects[resource].get(name)
            return clone(obj) if obj is not None else None

    def list_all(self, resource: str) -> tuple[list[dict[str, Any]], int]:
        with self.cond:
            items = [clone(o) for _, o in sorted(self.objects[resource].items())]
            return items, self.rv

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            meta = obj["metadata"]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            return self._commit(resource, obj, "ADDED")

    def replace(self, resource: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """Store `new` unless it equals `old` (a no-op write changes nothing, as on the real server)."""
        with self.cond:
            if _comparable(old) == _comparable(new):
                return clone(self.objects[resource][old["metadata"]["name"]])
            return self._commit(resource, new, "MODIFIED")

    def delete(self, resource: str, name: str) -> None:
        with self.cond:
            old = self.objects[resource].pop(name)
            self.rv += 1
            gone = clone(old)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record(Event(self.rv, "DELETED", resource, gone, old))

    def _commit(self, resource: str, new: dict[str, Any], kind: str) -> dict[str, Any]:
        self.rv += 1
        stored = clone(new)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        previous = self.objects[resource].get(stored["metadata"]["name"])
        self.objects[resource][stored["metadata"]["name"]] = stored
        # Stored objects are never changed in place, so events share them with the store.
        self._record(Event(self.rv, kind, resource, stored, previous))
        return clone(stored)

    def _record(self, event: Event) -> None:
        self.history.append(event)
        if len(self.history) > HISTORY_LIMIT:
            dropped = self.history.pop(0)
            self.oldest_rv = dropped.rv
        self.cond.notify_all()

    def events_after(self, rv: int) -> list[Event]:
        """Events newer than rv; raises TooOld when history no longer reaches back to rv."""
        with self.cond:
            if rv < self.oldest_rv:
                raise TooOld(rv)
            return [e for e in self.history if e.rv > rv]

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watch resourceVersions now get 410."""
        with self.cond:
            self.history.clear()
            self.oldest_rv = self.rv
            self.cond.notify_all()

    def drop_watches(self, reset: bool = False) -> None:
        with self.cond:
            self.drop_generation += 1
            self.drop_with_reset = reset
            self.cond.notify_all()

    def send_bookmarks(self) -> None:
        with self.cond:
            self.bookmark_generation += 1
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what a no-op write may touch (managedFields times, resourceVersion)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    fields = [{k: v for k, v in e.items() if k != "time"} for e in obj["metadata"].get("managedFields") or []]
    return obj | {"metadata": meta | {"managedFields": fields}}
