"""How much latency the fake API server adds: PATCH round trips and watch-event delivery on loopback.

    .venv/bin/python -m benchmarks.apiserver_latency

Run from the repository root. Figures go into docs/apiserver.md; this is not a test.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client, watch

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
        body = {"metadata": {"labels": {"nvidia.com/round": str(i)}}}
        response = api_client.call_api(
            "PATCH", f"{api.url}/api/v1/nodes/gpu-1", header_params=headers, body=body
        )
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


def main() -> None:
    with FakeApiServer() as api:
        api.add_node("gpu-1", labels={f"nvidia.com/l{i}": "x" for i in range(40)})
        for name, times in (
            ("PATCH round trip", patch_round_trips(api)),
            ("watch delivery", watch_delivery(api)),
        ):
            print(
                f"{name}: p50 {percentile(times, 0.5):.2f} ms, p99 {percentile(times, 0.99):.2f} ms"
                f" over {len(times)}"
            )


if __name__ == "__main__":
    main()
