"""The start-up check that the admission policy is enforced, against the fake server evaluating rbac/'s
policy (or a changed copy): passed only when the policy of the expected name refuses each dry-run probe,
failed naming each property admitted or refused by another policy, never passed by an RBAC refusal or by an
older policy of the right name, and no probe ever stored. The same on the real kube-apiserver:
tests/kube/test_nfd_lite.py and tests/kube/test_selfcheck_live.py; the check repeated while the writer
runs: tests/nfd_lite/test_admission_recheck.py."""

from __future__ import annotations

import copy
import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import AdmissionRefused, Forbidden
from nfd_lite.api.kubeconfig import kubeconfig_connection
from nfd_lite.files.policy import Policy
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from nfd_lite.node.selfcheck import (
    MANAGED_FIELDS,
    OTHER_NODES,
    POLICY_ENV,
    RESERVED_LABELS,
    TAINTS,
    PolicyNotEnforced,
    check_policy,
)
from tests.apiserver.server import REPO_RBAC, FakeApiServer
from tests.nfd_lite.harness import NODE, OTHER_NODE, node_api

PROPERTIES = (OTHER_NODES, RESERVED_LABELS, TAINTS, MANAGED_FIELDS)
# rbac/admission-policy.yaml as it was before its managedFields rules (the same name, an older version).
WITHOUT_MANAGED_FIELDS = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "policies"
    / "admission-policy-without-managed-fields.yaml"
)


def versions(server: FakeApiServer) -> dict[str, str]:
    return {n: server.get_node(n)["metadata"]["resourceVersion"] for n in (NODE, OTHER_NODE)}


def changed_rbac(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], file: str = "admission-policy.yaml"
) -> Path:
    """A copy of rbac/ whose documents in ``file`` ``change`` edits in place."""
    directory = tmp_path / "rbac"
    shutil.copytree(REPO_RBAC, directory)
    path = directory / file
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for document in documents:
        change(document)
    path.write_text(yaml.safe_dump_all(documents))
    return directory


def without_node_rules(document: dict[str, Any]) -> None:
    if document["kind"] == "ValidatingAdmissionPolicy":
        rules = document["spec"]["validations"]
        document["spec"]["validations"] = [r for r in rules if "variables.tokenNode" not in r["expression"]]


def binding_renamed(document: dict[str, Any]) -> None:
    if document["kind"] == "ValidatingAdmissionPolicyBinding":
        document["metadata"]["name"] = "site-binding"


def two_nodes(server: FakeApiServer) -> FakeApiServer:
    server.add_node(NODE)
    server.add_node(OTHER_NODE, {"team.example.com/owner": "ml"})
    return server


def test_the_shipped_policy_passes_and_nothing_is_stored(tmp_path: Path) -> None:
    with two_nodes(FakeApiServer()) as server:  # enforces rbac/admission-policy.yaml
        before = versions(server)
        check_policy(node_api(server, tmp_path))
        assert versions(server) == before
        patches = [r for r in server.requests if r.method == "PATCH"]
        assert {r.path for r in patches} == {f"/api/v1/nodes/{NODE}", f"/api/v1/nodes/{OTHER_NODE}"}
        assert all(r.query.get("dryRun") == "All" for r in patches), patches


def test_on_a_node_carrying_its_labels_the_probe_keeps_them_in_the_ownership_record(tmp_path: Path) -> None:
    # The probe label is created, so it joins the record; a key leaving it without its label is refused.
    mine = {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "H100"}
    with FakeApiServer() as server:
        server.add_node(NODE, labels=mine, annotations={OWNED_ANNOTATION: ",".join(sorted(mine))})
        server.add_node(OTHER_NODE)
        before = versions(server)
        check_policy(node_api(server, tmp_path))
        assert versions(server) == before


def test_a_server_without_the_policy_fails_naming_every_property(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    before = versions(two_nodes(apiserver))
    with pytest.raises(PolicyNotEnforced) as failed:
        check_policy(node_api(apiserver, tmp_path))
    message = str(failed.value)
    for prop in PROPERTIES:
        assert f"{prop} are not refused: " in message
    assert f"a label on Node {OTHER_NODE} was admitted" in message
    assert "\n" not in message
    assert versions(apiserver) == before


def test_the_policy_without_its_node_rules_fails_naming_that_property(tmp_path: Path) -> None:
    with two_nodes(FakeApiServer(changed_rbac(tmp_path, without_node_rules))) as server:
        before = versions(server)
        with pytest.raises(PolicyNotEnforced) as failed:
            check_policy(node_api(server, tmp_path))
        message = str(failed.value)
        assert f"{OTHER_NODES} are not refused: a label on Node {OTHER_NODE} was admitted" in message
        assert f"{RESERVED_LABELS} are not refused" not in message
        assert f"{TAINTS} are not refused" not in message
        assert versions(server) == before


def previous_release(tmp_path: Path) -> Path:
    """A copy of rbac/ whose admission policy is the last one without the managedFields rules."""
    directory = tmp_path / "rbac-previous"
    shutil.copytree(REPO_RBAC, directory)
    shutil.copy(WITHOUT_MANAGED_FIELDS, directory / "admission-policy.yaml")
    return directory


def test_the_previous_policy_without_its_managed_fields_rules_fails_naming_that_property(
    tmp_path: Path,
) -> None:
    """Same name, same binding, every other probe refused: only the forged entry tells the versions apart."""
    with two_nodes(FakeApiServer(previous_release(tmp_path))) as server:
        before = versions(server)
        with pytest.raises(PolicyNotEnforced) as failed:
            check_policy(node_api(server, tmp_path))
        message = str(failed.value)
        assert f"{MANAGED_FIELDS} are not refused: a managedFields entry of manager " in message
        assert f"on this Node ({NODE}) was admitted" in message
        assert failed.value.missing == [MANAGED_FIELDS]
        assert versions(server) == before


def without_managed_fields_rules(document: dict[str, Any]) -> None:
    if document["kind"] == "ValidatingAdmissionPolicy":
        rules = document["spec"]["validations"]
        document["spec"]["validations"] = [r for r in rules if "managedFields" not in r["message"]]


def test_the_policy_without_its_managed_fields_rules_fails_naming_that_property(tmp_path: Path) -> None:
    with two_nodes(FakeApiServer(changed_rbac(tmp_path, without_managed_fields_rules))) as server:
        with pytest.raises(PolicyNotEnforced) as failed:
            check_policy(node_api(server, tmp_path))
        assert failed.value.missing == [MANAGED_FIELDS]


def managed_fields_rule_reworded(document: dict[str, Any]) -> None:
    """Our policy refuses the forged entry, but says nothing of managedFields (as a rule about something
    else refusing it would)."""
    if document["kind"] == "ValidatingAdmissionPolicy":
        for rule in document["spec"]["validations"]:
            rule["message"] = rule["message"].replace("metadata.managedFields", "this request")


def test_a_refusal_of_the_forged_entry_for_another_reason_does_not_pass(tmp_path: Path) -> None:
    server = two_nodes(FakeApiServer(changed_rbac(tmp_path, managed_fields_rule_reworded)))
    with server, pytest.raises(PolicyNotEnforced) as failed:
        check_policy(node_api(server, tmp_path))
    assert failed.value.missing == [MANAGED_FIELDS]
    assert "not refused by its rule for them" in str(failed.value)
    assert "not naming metadata.managedFields" in str(failed.value)


class DryRuns(NodeApi):
    """The real client, keeping the body of every dry run of its own Node."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dry_runs: list[dict[str, Any]] = []

    def patch_node(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        if dry_run:
            self.dry_runs.append(copy.deepcopy(dict(body)))
        return super().patch_node(body, dry_run=dry_run)


def test_the_forged_entry_is_the_nodes_own_list_plus_one_apply_entry(tmp_path: Path) -> None:
    """The probe sends the Node's managedFields as read, whole (a merge patch replaces a list), plus one
    Apply entry of a manager the Node does not have: nothing else, so no other rule can refuse it."""
    with two_nodes(FakeApiServer()) as server:
        kubeconfig = server.write_kubeconfig(
            tmp_path / "kubeconfig",
            server.token_for_service_account("gpu-labeller", "nfd-lite", node_name=NODE),
        )
        api = DryRuns(kubeconfig_connection(kubeconfig), NODE)
        check_policy(api)
        live = server.get_node(NODE)["metadata"]["managedFields"]
    (body,) = [b for b in api.dry_runs if "managedFields" in b.get("metadata", {})]
    assert list(body) == ["metadata"] and list(body["metadata"]) == ["managedFields"]
    *kept, added = body["metadata"]["managedFields"]
    assert kept == live
    assert added["operation"] == "Apply" and added["manager"] not in {e["manager"] for e in live}


def test_a_refusal_by_a_policy_of_another_name_does_not_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(POLICY_ENV, "release-a-nfd-lite")  # as the chart sets it for its release
    with two_nodes(FakeApiServer()) as server, pytest.raises(PolicyNotEnforced) as failed:
        check_policy(node_api(server, tmp_path))
    message = str(failed.value)
    for prop in PROPERTIES:
        assert f"{prop} are not refused by it: " in message
    assert (
        "was refused by ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding "
        "'gpu-labeller-nfd-lite', not by 'release-a-nfd-lite'" in message
    )


def test_the_expected_name_passes_when_the_policy_carries_it(tmp_path: Path) -> None:
    with two_nodes(FakeApiServer()) as server:
        check_policy(node_api(server, tmp_path), expected="gpu-labeller-nfd-lite")


def test_our_policy_under_a_binding_of_another_name_does_not_pass(tmp_path: Path) -> None:
    server = two_nodes(FakeApiServer(changed_rbac(tmp_path, binding_renamed)))
    with server, pytest.raises(PolicyNotEnforced, match="with binding 'site-binding', not by"):
        check_policy(node_api(server, tmp_path))


def test_on_a_one_node_cluster_the_other_node_probe_is_skipped_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeApiServer() as server:
        server.add_node(NODE)
        with caplog.at_level(logging.WARNING, logger="nfd_lite.node.selfcheck"):
            check_policy(node_api(server, tmp_path))
        assert [r for r in server.requests if r.method == "PATCH" and OTHER_NODE in r.path] == []
    assert f"{OTHER_NODES} is not checked, as there is no other Node (a one-node cluster)" in caplog.text


def list_only_own_node(document: dict[str, Any]) -> None:
    """The ClusterRole's list/watch narrowed to the writer's Node (what its own-node watch needs)."""
    for rule in document["rules"]:
        if "list" in rule["verbs"]:
            rule["resourceNames"] = [NODE]


def test_a_token_that_may_not_list_other_nodes_skips_that_probe_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with two_nodes(FakeApiServer(changed_rbac(tmp_path, list_only_own_node, "clusterrole.yaml"))) as server:
        with caplog.at_level(logging.WARNING, logger="nfd_lite.node.selfcheck"):
            check_policy(node_api(server, tmp_path))
        assert [r for r in server.requests if r.method == "PATCH" and OTHER_NODE in r.path] == []
    assert f"{OTHER_NODES} is not checked, as this token may not list Nodes" in caplog.text


def test_a_one_node_cluster_without_the_policy_still_fails(apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.add_node(NODE)
    with pytest.raises(PolicyNotEnforced, match=f"{TAINTS} are not refused"):
        check_policy(node_api(apiserver, tmp_path))


def test_a_token_without_a_node_claim_is_raised_as_for_any_write(tmp_path: Path) -> None:
    """Every probe refused by the policy's first rule (no node-name claim to check): a label the writer may
    set is refused too, so every write would be; that is not 'not enforced', and the server's reason is
    raised as for any refused write."""
    with two_nodes(FakeApiServer()) as server:
        token = server.token_for_service_account("gpu-labeller", "nfd-lite")  # no node claim
        with pytest.raises(AdmissionRefused, match="node-name claim"):
            check_policy(node_api(server, tmp_path, token=token))


def test_prefixes_the_policy_does_not_allow_leave_it_enforced(tmp_path: Path) -> None:
    """Each probe refused by its own rule proves the policy, whatever the writer may write: its writes of
    example.com/ labels are then refused one by one, as held-back labels (test_admission_refusals)."""
    with two_nodes(FakeApiServer()) as server:
        before = versions(server)
        assert check_policy(node_api(server, tmp_path), Policy.from_prefixes(["example.com/"])) == 2
        assert versions(server) == before


def test_an_rbac_refusal_is_not_taken_for_the_policy(tmp_path: Path) -> None:
    with two_nodes(FakeApiServer()) as server:
        stranger = node_api(server, tmp_path, token=server.token_for_user("someone"))
        with pytest.raises(Forbidden) as refused:
            check_policy(stranger)
        assert not isinstance(refused.value, AdmissionRefused)
