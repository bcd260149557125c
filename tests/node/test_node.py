"""The fixture itself: a node that a kubelet really runs, as the other node tests rely on."""

from __future__ import annotations

import base64
import json

import pytest

from tests.node.cluster import NodeCluster
from tests.node.images import BUSYBOX_IMAGE
from tests.node.workloads import apply, delete, pod, wait_phase

pytestmark = pytest.mark.timeout(900)


def test_node_is_ready_untainted_and_reaches_its_api_server(real_node: NodeCluster) -> None:
    node = real_node.get_node(real_node.node)
    assert real_node.node_ready()
    assert not node["spec"].get("taints")
    assert node["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert real_node.service_reachable()
    assert real_node.must("GET", "/version")["gitVersion"] == "v1.37.2"


def test_a_pod_runs_and_gets_a_token_bound_to_its_node(real_node: NodeCluster) -> None:
    read_token = ["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]
    apply(real_node, pod("token-reader", BUSYBOX_IMAGE, read_token))
    wait_phase(real_node, "default", "token-reader", "Succeeded")
    token = real_node.kubectl("logs", "-n", "default", "token-reader").stdout.strip()
    claims_part = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(claims_part + "=" * (-len(claims_part) % 4)))
    node = real_node.get_node(real_node.node)
    assert claims["kubernetes.io"]["node"] == {"name": real_node.node, "uid": node["metadata"]["uid"]}
    delete(real_node, "default", "token-reader")
