"""Simulated own-Node watches: many from one process, each the request nfd-lite makes for its one (its Node
by name, from a resourceVersion, with bookmarks and ``timeoutSeconds=1800``, on a TLS connection of its
own), held open and read until closed. They stand in for writers beyond those a 2-core machine runs, for
the one figure only their number shows: what the API server holds per watch. Every figure that uses them
says "simulated"; ``calibrate`` checks their request against a real writer's in the audit log.

They authenticate as the admin, not with a pod-bound token each as a writer does: the server's cache of
authenticated tokens (one entry per writer) is not in what they measure."""

from __future__ import annotations

import asyncio
import ssl
import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from nfd_lite.api.client import USER_AGENT
from tests.kube.controlplane import ControlPlane
from tests.kube.fleet import metrics, process_usage, total

WATCH_SECONDS = 1800  # the chart's --watch-timeout
OPENING = 64  # connections being opened at once
# Query parameters that differ from one watch to the next; every other one must be the writer's.
VARYING = frozenset({"fieldSelector", "resourceVersion"})
GC_CYCLES = 3  # collections whose live heaps make one reading of what the server holds


def watch_target(node: str, resource_version: str) -> str:
    query = [
        ("fieldSelector", f"metadata.name={node}"),
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(WATCH_SECONDS)),
    ]
    return "/api/v1/nodes?" + urlencode(query)


def calibrate(writer_uri: str) -> None:
    """Raise unless a simulated watch asks what the real writer's watch (its audit log ``requestURI``) did,
    but for the Node's name and the resourceVersion."""
    theirs, ours = urlsplit(writer_uri), urlsplit(watch_target("x", "1"))
    want = {k: v for k, v in parse_qsl(theirs.query) if k not in VARYING}
    have = {k: v for k, v in parse_qsl(ours.query) if k not in VARYING}
    if (theirs.path, want) != (ours.path, have):
        raise AssertionError(f"simulated watch {ours.path}?{have} is not the writer's {theirs.path}?{want}")


class Watches:
    """``with Watches(kube) as watches: watches.open(nodes, rv)``: that many watches open until the block
    ends; ``open`` returns once the server answered each (200, its head read)."""

    def __init__(self, kube: ControlPlane) -> None:
        host, _, port = kube.url.removeprefix("https://").partition(":")
        self.host, self.port = host, int(port)
        self.token = kube.admin_token
        self.context = ssl.create_default_context(cafile=str(kube.ca))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="simulated-watches", daemon=True)
        self.writers: list[asyncio.StreamWriter] = []
        self.readers: list[asyncio.Task[None]] = []
        self.ended = 0  # watches the server ended before they were closed

    def __enter__(self) -> Watches:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    @property
    def count(self) -> int:
        return len(self.writers)

    def open(self, nodes: Sequence[str], resource_version: str, timeout: float = 600) -> None:
        future: Future[None] = asyncio.run_coroutine_threadsafe(
            self._open(nodes, resource_version), self.loop
        )
        future.result(timeout)

    async def _open(self, nodes: Sequence[str], resource_version: str) -> None:
        gate = asyncio.Semaphore(OPENING)

        async def one(node: str) -> None:
            async with gate:
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.context, server_hostname=self.host
                )
                head = (
                    f"GET {watch_target(node, resource_version)} HTTP/1.1\r\n"
                    f"Host: {self.host}:{self.port}\r\n"
                    f"Accept: application/json\r\nUser-Agent: {USER_AGENT} (simulated)\r\n"
                    f"Authorization: Bearer {self.token}\r\n\r\n"
                )
                writer.write(head.encode())
                answer = await reader.readuntil(b"\r\n\r\n")
                status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
                if status.split()[1:2] != ["200"]:
                    writer.close()
                    raise RuntimeError(f"simulated watch of {node}: {status}")
                self.writers.append(writer)
                self.readers.append(asyncio.ensure_future(self._drain(reader)))

        await asyncio.gather(*(one(node) for node in nodes))

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        """Read the events as they come (a watch whose reader stops would fill the server's buffers)."""
        while await reader.read(65536):
            pass
        self.ended += 1

    async def _close(self) -> None:
        for task in self.readers:
            task.cancel()
        for writer in self.writers:
            writer.close()
        await asyncio.gather(*self.readers, return_exceptions=True)
        self.writers.clear()
        self.readers.clear()


@dataclass
class Held:
    """What kube-apiserver holds with ``watches`` open: its live heap plus goroutine stacks right after a
    garbage collection (a heap read between two collections carries garbage of any age, hundreds of MiB
    on a busy server) and its goroutines, each the median of GC_CYCLES readings, and its RSS."""

    watches: int
    live_mib: float
    goroutines: float
    rss_mib: float


def held(kube: ControlPlane, watches: int) -> Held:
    readings: list[tuple[float, float]] = []
    for _ in range(GC_CYCLES):
        # The server's own profiling endpoint (on by default, for cluster admins) collects garbage before it
        # writes a heap profile; the live heap its metrics give next is that collection's.
        answer = kube.request("GET", "/debug/pprof/heap?gc=1")
        if answer.status != 200:
            raise RuntimeError(
                f"kube-apiserver's /debug/pprof/heap answered {answer.status}: {answer.message}"
            )
        samples = metrics(kube)
        live = total(samples, "go_gc_heap_live_bytes") + total(samples, "go_memory_classes_heap_stacks_bytes")
        readings.append((live / 2**20, total(samples, "go_goroutines")))
        time.sleep(1)
    return Held(
        watches,
        statistics.median(live for live, _ in readings),
        statistics.median(goroutines for _, goroutines in readings),
        process_usage(kube.apiserver.pid)[1],
    )


def watch_cost(kube: ControlPlane, nodes: Sequence[str], steps: int = 2) -> list[Held]:
    """What the server holds with no simulated watch, then with ``steps`` growing shares of one per Node
    of ``nodes`` (the last step all of them), each reading taken with those watches open."""
    answer = kube.request("GET", "/api/v1/nodes?limit=1")
    resource_version = answer.json()["metadata"]["resourceVersion"]
    readings = [held(kube, 0)]
    with Watches(kube) as watches:
        for step in range(1, steps + 1):
            watches.open(nodes[watches.count : len(nodes) * step // steps], resource_version)
            readings.append(held(kube, watches.count))
        if watches.ended:
            raise RuntimeError(f"the server ended {watches.ended} simulated watches while they were measured")
    return readings


def per_thousand(readings: Sequence[Held]) -> tuple[float, float, float]:
    """MiB held, goroutines and MiB of RSS per 1,000 watches: the least-squares slope over the readings."""
    xs = [r.watches for r in readings]
    mean_x = statistics.fmean(xs)
    spread = sum((x - mean_x) ** 2 for x in xs)

    def slope(ys: list[float]) -> float:
        mean_y = statistics.fmean(ys)
        return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread

    return (
        slope([r.live_mib for r in readings]),
        slope([r.goroutines for r in readings]),
        slope([r.rss_mib for r in readings]),
    )
