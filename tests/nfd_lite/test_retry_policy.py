"""The one retry policy as a user meets it: prune gives up at once on what retrying cannot fix and retries
the rest; a long API outage makes the daemon check the admission policy again before writing."""

from __future__ import annotations

from pathlib import Path

import pytest

from nfd_lite.client import Forbidden
from nfd_lite.policy import Policy
from nfd_lite.prune import prune
from nfd_lite.reconciler import OWNED_ANNOTATION
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, Writer, eventually, node_api, ours

NODE_PATH = f"/api/v1/nodes/{NODE}"
WANT = {"nvidia.com/gpu.count": "2"}


@pytest.fixture
def labelled(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.add_node(
        NODE, labels={"nvidia.com/gpu.count": "2"}, annotations={OWNED_ANNOTATION: "nvidia.com/gpu.count"}
    )
    return apiserver


def test_prune_retries_a_server_error(labelled: FakeApiServer, tmp_path: Path) -> None:
    fault = labelled.inject(method="GET", path=NODE_PATH, status=503, count=2)
    assert prune(node_api(labelled, tmp_path), Policy()) == ["nvidia.com/gpu.count"]
    assert fault.hits == 2
    assert ours(labelled) == {}


def test_prune_reports_a_refusal_at_once(labelled: FakeApiServer, tmp_path: Path) -> None:
    fault = labelled.inject(method="GET", path=NODE_PATH, status=403, count=5)
    with pytest.raises(Forbidden):
        prune(node_api(labelled, tmp_path), Policy())
    assert fault.hits == 1  # retrying cannot grant a permission
    assert ours(labelled) == {"nvidia.com/gpu.count": "2"}


def _probes(server: FakeApiServer) -> int:
    """The writer's admission-policy self-checks: dry-run patches of its node."""
    return sum(1 for r in server.requests if r.method == "PATCH" and r.query.get("dryRun") == "All")


@pytest.mark.parametrize(("recheck_after", "probes"), [(0.3, 2), (300.0, 1)])
def test_a_long_outage_makes_it_check_the_admission_policy_again(
    tmp_path: Path, recheck_after: float, probes: int
) -> None:
    with FakeApiServer() as server:  # enforces rbac/admission-policy.yaml
        server.add_node(NODE)
        settings = {"require_admission_policy": True, "policy_recheck_after": recheck_after}
        with Writer(server, tmp_path, **settings) as w:
            w.write("nvidia.com/gpu.count=2\n")
            assert eventually(lambda: ours(server) == WANT and server.open_watches == 1)
            assert _probes(server) == 1
            # Four failed watch requests in a row: at least 0.05 + 0.1 + 0.2 s of backoff between them.
            fault = server.inject(method="GET", path="/api/v1/nodes", watch=True, status=503, count=4)
            server.drop_watches()
            assert eventually(lambda: fault.hits == 4 and server.open_watches == 1)
            server.drop_watches()  # that watch ending is the first answer since the outage began
            syncs = w.syncs()
            server.patch_node(NODE, {"metadata": {"labels": {"example.com/team": "ml"}}})
            assert eventually(lambda: w.syncs() > syncs)  # a pass with nothing to write
        assert ours(server) == WANT
        assert _probes(server) == probes
