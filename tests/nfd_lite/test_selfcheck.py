"""The start-up check that the admission policy is enforced: passed only when the policy itself refuses the
dry-run probe, failed when the server accepts it, and never passed by an RBAC refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from nfd_lite.apierrors import AdmissionRefused, Forbidden
from nfd_lite.selfcheck import PROBE_ANNOTATION, PolicyNotEnforced, check_policy
from tests.apiserver.server import FakeApiServer
from tests.nfd_lite.harness import NODE, node_api


def test_the_policy_refusing_the_probe_passes_and_nothing_is_stored(tmp_path: Path) -> None:
    with FakeApiServer() as server:  # enforces rbac/admission-policy.yaml
        server.add_node(NODE)
        check_policy(node_api(server, tmp_path))
        assert PROBE_ANNOTATION not in (server.get_node(NODE)["metadata"].get("annotations") or {})


def test_a_server_without_the_policy_fails_the_check(apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.add_node(NODE)
    with pytest.raises(PolicyNotEnforced):
        check_policy(node_api(apiserver, tmp_path))
    assert PROBE_ANNOTATION not in (apiserver.get_node(NODE)["metadata"].get("annotations") or {})


def test_an_rbac_refusal_is_not_taken_for_the_policy(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add_node(NODE)
        stranger = node_api(server, tmp_path, token=server.token_for_user("someone"))
        with pytest.raises(Forbidden) as refused:
            check_policy(stranger)
        assert not isinstance(refused.value, AdmissionRefused)
