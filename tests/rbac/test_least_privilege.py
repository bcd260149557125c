"""The writer's permissions are exactly the documented least set, and the policy matches the writer."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nfd_lite.files.policy import CONTROL_LABELS, DEFAULT_ALLOW_PREFIXES
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.apiserver.admission import evaluate
from tests.apiserver.auth import Attributes, Rbac, service_account_user
from tests.rbac.manifests import NAME, NAMESPACE, RBAC_DIR, WRITER, documents, one

DOCUMENTED = {("", "nodes", verb) for verb in ("get", "patch", "list", "watch")}
VERBS = (
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "escalate",
    "bind",
    "impersonate",
    "approve",
    "sign",
)
RESOURCES = [
    ("", r, s)
    for r, s in [
        ("nodes", ""),
        ("nodes", "status"),
        ("nodes", "proxy"),
        ("pods", ""),
        ("secrets", ""),
        ("configmaps", ""),
        ("serviceaccounts", "token"),
        ("events", ""),
    ]
] + [
    ("events.k8s.io", "events", ""),
    ("rbac.authorization.k8s.io", "clusterroles", ""),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies", ""),
    ("node.k8s.io", "runtimeclasses", ""),
    ("nfd.k8s-sigs.io", "nodefeatures", ""),
    ("coordination.k8s.io", "leases", ""),
]


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_rbac_holds_exactly_the_expected_objects() -> None:
    kinds = sorted(d["kind"] for d in documents())
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    )


def test_the_writer_role_grants_exactly_the_documented_set() -> None:
    rules = one("ClusterRole")["rules"]
    assert granted(rules) == DOCUMENTED
    assert not any("resourceNames" in r or "nonResourceURLs" in r for r in rules)


def test_no_wildcard_anywhere_in_roles_or_bindings() -> None:
    for doc in documents():
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            assert "*" not in "".join(strings(doc.get("rules", [])) + strings(doc.get("subjects", [])))


def test_the_binding_grants_the_role_to_the_writer_alone() -> None:
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-labeller-nfd-lite",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    account = one("ServiceAccount")
    assert (account["metadata"]["namespace"], account["metadata"]["name"]) == (NAMESPACE, NAME)


@pytest.mark.parametrize(("group", "resource", "subresource"), RESOURCES)
def test_can_i_list_of_the_writer(group: str, resource: str, subresource: str) -> None:
    """What `kubectl auth can-i --list --as=<writer>` would show, resource by resource."""
    rbac = Rbac(documents())
    user = service_account_user(NAMESPACE, NAME, "gpu-1")
    allowed = {v for v in VERBS if rbac.allows(user, Attributes(v, group, resource, subresource, "gpu-1"))}
    expected = {v for g, r, v in DOCUMENTED if (g, r) == (group, resource)} if not subresource else set()
    assert allowed == expected


def test_every_rule_carries_a_comment_saying_why() -> None:
    text = (RBAC_DIR / "clusterrole.yaml").read_text().splitlines()
    starts = [n for n, line in enumerate(text) if re.match(r"^\s*- apiGroups:", line)]
    assert starts
    for n in starts:
        assert text[n - 1].strip().startswith("#") and len(text[n - 1].strip()) > 20, text[n]


def test_the_policy_fails_closed_and_denies() -> None:
    policy, binding = one("ValidatingAdmissionPolicy"), one("ValidatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_the_policy_restricts_exactly_the_writer() -> None:
    condition = one("ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]["expression"]
    for username, expected in [
        (WRITER, True),
        ("system:serviceaccount:gpu-labeller:other", False),
        ("system:node:gpu-1", False),
    ]:
        assert evaluate(condition, {"request": {"userInfo": {"username": username}}}) is expected


def test_the_policy_allows_what_the_writer_writes() -> None:
    spec = one("ValidatingAdmissionPolicy")["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert tuple(evaluate(variables["allowedPrefixes"], {})) == DEFAULT_ALLOW_PREFIXES
    assert f"'{OWNED_ANNOTATION}'" in "".join(v["expression"] for v in spec["validations"])


def test_the_policy_refuses_the_same_control_labels_as_the_writer() -> None:
    variables = {v["name"]: v["expression"] for v in one("ValidatingAdmissionPolicy")["spec"]["variables"]}
    assert set(evaluate(variables["controlLabels"], {})) == set(CONTROL_LABELS.exact)
    assert set(evaluate(variables["controlPrefixes"], {})) == set(CONTROL_LABELS.prefixes)
