"""Every state of a Node's labels, as a real watch delivers it: how the node tests tell that a label never
disappeared (no flapping) while pods were rolled, killed or restarted."""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
import urllib.request
from types import TracebackType

from tests.kube.controlplane import ControlPlane


class LabelHistory:
    """``with LabelHistory(kube, node) as history:`` records the node's labels at every change."""

    def __init__(self, kube: ControlPlane, node: str) -> None:
        self._kube = kube
        self._node = node
        self.states: list[tuple[float, dict[str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"label-history-{node}", daemon=True)
        self._watching = threading.Event()

    def __enter__(self) -> LabelHistory:
        self._thread.start()
        if not self._watching.wait(15):
            raise AssertionError(f"could not watch node {self._node}")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(15)

    def _watch(self) -> None:
        context = ssl.create_default_context(cafile=str(self._kube.ca))
        headers = {"Authorization": f"Bearer {self._kube.admin_token}"}
        node = self._kube.get_node(self._node)
        self.states.append((time.monotonic(), dict(node["metadata"].get("labels") or {})))
        version = node["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            url = (
                f"{self._kube.url}/api/v1/nodes?watch=1&timeoutSeconds=5&resourceVersion={version}"
                f"&fieldSelector=metadata.name%3D{self._node}&allowWatchBookmarks=true"
            )
            request = urllib.request.Request(url, headers=headers)
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(request, context=context, timeout=20) as stream,
            ):
                self._watching.set()
                for line in stream:
                    event = json.loads(line)
                    metadata = event["object"].get("metadata", {})
                    version = metadata.get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.states.append((time.monotonic(), dict(metadata.get("labels") or {})))
                    if self._stop.is_set():
                        return

    def missing(self, keys: set[str]) -> list[set[str]]:
        """For each recorded state that lacked any of ``keys``, which ones it lacked."""
        return [gone for _, labels in self.states if (gone := keys - labels.keys())]

    def values_of(self, key: str) -> list[str | None]:
        """The successive values of ``key`` (None: absent), repeats folded."""
        seen: list[str | None] = []
        for _, labels in self.states:
            if not seen or seen[-1] != labels.get(key):
                seen.append(labels.get(key))
        return seen
