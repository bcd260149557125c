"""The one retry policy as a user meets it: prune gives up at once on what retrying cannot fix and retries
the rest; a long API outage makes the daemon check the admission policy again before writing; a refusal
is one log line while it lasts, not one per retry."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from nfd_lite.api.errors import Forbidden, explain
from nfd_lite.api.retry import RetryPolicy
from nfd_lite.files.policy import Policy
from nfd_lite.node.prune import prune
from nfd_lite.node.reconciler import OWNED_ANNOTATION
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
    assert prune(node_api(labelled, tmp_path), Policy()).removed == ["nvidia.com/gpu.count"]
    assert fault.hits == 2
    assert ours(labelled) == {}


def test_prune_reports_a_refusal_at_once(labelled: FakeApiServer, tmp_path: Path) -> None:
    fault = labelled.inject(method="GET", path=NODE_PATH, status=403, count=5)
    with pytest.raises(Forbidden):
        prune(node_api(labelled, tmp_path), Policy())
    assert fault.hits == 1  # retrying cannot grant a permission
    assert ours(labelled) == {"nvidia.com/gpu.count": "2"}


def test_prune_removes_what_the_policy_lets_go_and_names_what_it_refused(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    refused = "nvidia.com/gpu.locked"
    apiserver.add_node(
        NODE,
        labels={"nvidia.com/gpu.count": "2", refused: "1"},
        annotations={OWNED_ANNOTATION: f"nvidia.com/gpu.count,{refused}"},
    )
    message = f"ValidatingAdmissionPolicy 'site' with binding 'site' denied request: {refused} is locked"
    apiserver.inject(method="PATCH", path=NODE_PATH, status=403, message=message, count=1)
    pruned = prune(node_api(apiserver, tmp_path), Policy())
    assert pruned.removed == ["nvidia.com/gpu.count"]
    assert list(pruned.refused) == [refused] and "is locked" in pruned.refused[refused]
    assert ours(apiserver) == {refused: "1"}
    assert apiserver.get_node(NODE)["metadata"]["annotations"][OWNED_ANNOTATION] == refused


def _probes(server: FakeApiServer) -> int:
    """The writer's admission-policy self-checks: each begins its probe of other Nodes by listing two."""
    return sum(1 for r in server.requests if r.method == "GET" and r.query.get("limit") == "2")


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


def answering(*outcomes: Exception | None) -> Callable[[], str]:
    """A request that fails with each given error in turn, or succeeds where the outcome is None."""
    left = list(outcomes)

    def request() -> str:
        outcome = left.pop(0)
        if outcome is not None:
            raise outcome
        return "ok"

    return request


def test_a_refusal_is_logged_once_while_it_lasts_and_again_after_it_was_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = RetryPolicy(max_backoff=0.001)
    refused = Forbidden(403, "nodes is forbidden", verb="patch")
    request = answering(refused, refused, refused, None, refused, None)
    with caplog.at_level(logging.ERROR, "nfd_lite"):
        assert policy.call(request, "patch", attempts=4) == "ok"
        assert policy.call(request, "patch", attempts=4) == "ok"
    assert caplog.messages == [explain(refused), explain(refused)]


def test_two_refusals_at_once_are_each_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    # The Node watch and the sync pass retry side by side; neither refusal hides or repeats the other.
    policy = RetryPolicy(max_backoff=0.001)
    no_watch = Forbidden(403, "cannot watch", verb="watch")
    no_patch = Forbidden(403, "cannot patch", verb="patch")
    with caplog.at_level(logging.ERROR, "nfd_lite"):
        for _ in range(3):
            for verb, refused in (("watch", no_watch), ("patch", no_patch)):
                with pytest.raises(Forbidden):
                    policy.call(answering(refused, refused), verb, attempts=2)
    assert caplog.messages == [explain(no_watch), explain(no_patch)]
