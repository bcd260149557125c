"""How much latency the fake API server (tests/apiserver) adds: PATCH round trips and watch-event
delivery on loopback, measured in this process with the official client. Its figures go into
docs/apiserver.md.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client, watch

from benchmarks.support.measure import Figure
from tests.apiserver.server import FakeApiServer

ROUNDS = 200


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e3


def patch_round_trips(api: FakeApiServer) -> list[float]:
    token = api.token_for_service_account("gpu-labeller", "nfd-lite", node_name="gpu-1")
    api_client = api.api_client(token)
    headers = {"Content-Type": "application/merge-patch+json", "Authorization": f"Bearer {token}"}
    times = []
    for i in range(ROUNDS):
        start = time.perf_counter()
        owned = {"gpu-labeller.io/owned-labels": "nvidia.com/gpu.round"}  # the admission policy's record
        body = {"metadata": {"labels": {"nvidia.com/gpu.round": str(i)}, "annotations": owned}}
        url = f"{api.url}/api/v1/nodes/gpu-1?fieldManager=nfd-lite"
        response = api_client.call_api("PATCH", url, header_params=headers, body=body)
        response.read()
        times.append(time.perf_counter() - start)
        assert response.status == 200, response.data
    return times


def watch_delivery(api: FakeApiServer) -> list[float]:
    v1: Any = client.CoreV1Api(api.api_client(api.admin_token()))
    sent: dict[str, float] = {}

    def change() -> None:
        assert api.wait_for_watches(1)
        for i in range(ROUNDS):
            sent[str(i)] = time.perf_counter()
            api.set_node_labels("gpu-1", {"nvidia.com/event": str(i)})
            time.sleep(0.002)

    writer = threading.Thread(target=change)
    writer.start()
    times = []
    w = watch.Watch()
    for event in w.stream(v1.list_node, field_selector="metadata.name=gpu-1", timeout_seconds=30):
        value = (event["raw_object"]["metadata"].get("labels") or {}).get("nvidia.com/event")
        if value in sent:
            times.append(time.perf_counter() - sent[value])
            if value == str(ROUNDS - 1):
                w.stop()
    writer.join()
    return times


def figures() -> list[Figure]:
    with FakeApiServer() as api:
        api.add_node("gpu-1", labels={f"nvidia.com/l{i}": "x" for i in range(40)})
        patch, delivery = patch_round_trips(api), watch_delivery(api)
    what = "the fake API server's own overhead"
    return [
        Figure("alone", f"{what}: {name}, {label} of {ROUNDS}", "ms", [percentile(times, fraction)], digits=2)
        for name, times in (("PATCH round trip", patch), ("watch delivery", delivery))
        for label, fraction in (("p50", 0.5), ("p99", 0.99))
    ]
