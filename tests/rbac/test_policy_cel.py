"""The admission policy's CEL, evaluated offline with cel-expr-python against admission requests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.apiserver.admission import Admission, Request, compile_expression
from tests.apiserver.auth import UserInfo, service_account_user
from tests.apiserver.status import ApiError
from tests.rbac.manifests import NAME, NAMESPACE, documents, one

CLAIM = "authentication.kubernetes.io/node-name"
OWNED = "gpu-labeller.io/owned-labels"


def node(name: str = "gpu-1", **changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.count": "8"},
            "annotations": {OWNED: "nvidia.com/gpu.count", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"pods": "110"}},
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = obj
        for part in parents:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return obj


def writer(node_name: str | None = "gpu-1") -> UserInfo:
    return service_account_user(NAMESPACE, NAME, node_name)


def decide(new: dict[str, Any], old: dict[str, Any], user: UserInfo, subresource: str = "") -> str | None:
    """None when the policy admits the update, else the refusal message."""
    request = Request("UPDATE", "", "v1", "nodes", "Node", old["metadata"]["name"], user, subresource)
    try:
        Admission(documents()).validate(request, new, old)
    except ApiError as err:
        assert err.code == 403 and err.reason == "Forbidden"
        return err.message
    return None


def test_every_expression_compiles() -> None:
    spec = one("ValidatingAdmissionPolicy")["spec"]
    items = spec["matchConditions"] + spec["variables"] + spec["validations"]
    expressions = [item[key] for item in items for key in ("expression", "messageExpression") if key in item]
    assert len(expressions) > len(items)
    for expression in expressions:
        compile_expression(expression)


def test_own_node_label_changes_under_allowed_prefixes_are_admitted() -> None:
    new = copy.deepcopy(node())
    new["metadata"]["labels"] |= {
        "nvidia.com/gpu.product": "H100",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }
    new["metadata"]["labels"]["nvidia.com/gpu.count"] = "4"
    new["metadata"]["annotations"][OWNED] = "feature.node.kubernetes.io/pci-10de.present,nvidia.com/gpu.count"
    assert decide(new, node(), writer()) is None


def test_removing_an_owned_label_is_admitted() -> None:
    new = node()
    del new["metadata"]["labels"]["nvidia.com/gpu.count"]
    new["metadata"]["annotations"][OWNED] = ""
    assert decide(new, node(), writer()) is None


def test_another_node_is_refused() -> None:
    old = node("gpu-2")
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["nvidia.com/gpu.count"] = "1"
    message = decide(new, old, writer("gpu-1"))
    assert message is not None and "may only change its own Node gpu-1, not gpu-2" in message


@pytest.mark.parametrize(
    "change",
    [
        {"kubernetes.io/role": "gpu"},  # a new label under a foreign prefix
        {"node-role.kubernetes.io/worker": ""},
        {"kubernetes.io/hostname": "elsewhere"},  # changing someone else's label
        {"sub.nvidia.com/x": "1"},  # a subdomain is not the allowed prefix
        {"nvidia.com": "1"},  # no prefix at all
        {"example.com/x": "1"},
    ],
)
def test_labels_outside_the_allowed_prefixes_are_refused(change: dict[str, str]) -> None:
    new = node()
    new["metadata"]["labels"] |= change
    message = decide(new, node(), writer())
    assert message is not None and f"not: {next(iter(change))}" in message


def test_removing_a_foreign_label_is_refused() -> None:
    new = node()
    del new["metadata"]["labels"]["kubernetes.io/hostname"]
    message = decide(new, node(), writer())
    assert message is not None and "not: kubernetes.io/hostname" in message


@pytest.mark.parametrize(
    "taints",
    [
        [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, {"key": "evil", "effect": "NoExecute"}],
        [],
        [{"key": "nvidia.com/gpu", "effect": "NoExecute"}],
    ],
)
def test_any_taint_change_is_refused(taints: list[dict[str, str]]) -> None:
    message = decide(node(spec__taints=taints), node(), writer())
    assert message is not None and "may not add, change or remove taints" in message


@pytest.mark.parametrize("change", [{"spec__unschedulable": True}, {"spec__podCIDR": "10.9.0.0/24"}])
def test_spec_changes_are_refused(change: dict[str, Any]) -> None:
    message = decide(node(**change), node(), writer())
    assert message is not None and "may not change the Node spec" in message


def test_annotations_other_than_the_ownership_record_are_refused() -> None:
    new = node()
    new["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "30"
    message = decide(new, node(), writer())
    assert message is not None and "not: node.alpha.kubernetes.io/ttl" in message


def test_finalizers_are_refused() -> None:
    message = decide(node(metadata__finalizers=["example.com/hold"]), node(), writer())
    assert message is not None and "finalizers" in message


def _claims(extra: dict[str, list[str]] | None) -> UserInfo:
    user = writer(None)
    return UserInfo(user.username, user.groups, user.uid, extra or {})


@pytest.mark.parametrize(
    "extra",
    [
        None,  # no extra at all: the field is absent from the request, as omitempty leaves it
        {"authentication.kubernetes.io/pod-name": ["nfd-lite-x"]},  # pod-bound, but no node claim
        {CLAIM: []},
        {CLAIM: ["gpu-1", "gpu-2"]},
    ],
)
def test_missing_or_ambiguous_node_claim_fails_closed(extra: dict[str, list[str]] | None) -> None:
    new = node()
    new["metadata"]["labels"]["nvidia.com/gpu.count"] = "4"
    message = decide(new, node(), _claims(extra))
    assert message is not None
    assert (
        "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding 'gpu-labeller-nfd-lite' denied"
        in message
    )


def test_an_evaluation_error_refuses_the_request() -> None:
    broken = node()
    broken["metadata"] = "not an object"  # every expression touching metadata errors
    assert decide(broken, node(), writer()) is not None


def test_status_writes_by_the_writer_are_held_to_the_same_rules() -> None:
    new = node()
    new["metadata"]["labels"]["kubernetes.io/role"] = "gpu"
    assert decide(new, node(), writer(), subresource="status") is not None


@pytest.mark.parametrize(
    "user",
    [
        UserInfo("system:node:gpu-1", ("system:nodes", "system:authenticated")),
        UserInfo("kubernetes-admin", ("system:masters", "system:authenticated")),
        service_account_user(NAMESPACE, "other", "gpu-1"),
    ],
)
def test_other_identities_are_not_restricted(user: UserInfo) -> None:
    assert decide(node(spec__taints=[], metadata__labels={"kubernetes.io/role": "x"}), node(), user) is None
