"""The admission policy, by real requests with the writer's real pod-bound token on a real kube-apiserver.

Every refusal must come from the policy itself (its own message), not from RBAC or validation, so a test
here fails if the policy stops being what refuses the request.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.kube.controlplane import ApiResponse, ControlPlane
from tests.kube.fixtures import RBAC_DIR, RELEASES, newest_and_oldest
from tests.kube.helm import type_check_warnings

POLICY = "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite'"


def refused(answer: ApiResponse, words: str) -> bool:
    return answer.status == 403 and POLICY in answer.message and words in answer.message


@pytest.fixture(scope="module", params=RELEASES)
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Every rule on the newest Kubernetes the chart claims (the session's control plane) and on the oldest,
    1.30, whose CEL environment is older: a policy that does not compile there refuses every write."""
    yield from newest_and_oldest(request, tmp_path_factory, rbac=True)


def test_the_policy_type_checks_without_warnings(kube: ControlPlane) -> None:
    assert type_check_warnings(kube, "gpu-labeller-nfd-lite", timeout=60) == []


@pytest.fixture
def own(kube: ControlPlane, new_node: Callable[..., str]) -> tuple[str, str]:
    """A Node carrying an administrator's labels and taint, and the writer's token bound to it."""
    node = new_node(
        {"kubernetes.io/hostname": "x", "team.example.com/owner": "ml", "nvidia.com/mig.config": "all-1g.5gb"}
    )
    kube.patch_node(node, {"spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}})
    return node, kube.pod_token(node)


def labels(values: dict[str, Any], owned: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": values}
    if owned is not None:
        meta["annotations"] = {OWNED_ANNOTATION: owned}
    return {"metadata": meta}


def test_own_labels_under_the_allowed_prefixes_are_admitted(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, token = own
    answer = kube.patch_node(
        node,
        labels(
            {"nvidia.com/gpu.count": "2", "feature.node.kubernetes.io/gpu.present": "true"},
            "feature.node.kubernetes.io/gpu.present,nvidia.com/gpu.count",
        ),
        token=token,
    )
    assert answer.status == 200, answer.message
    assert kube.labels(node)["nvidia.com/gpu.count"] == "2"


def test_a_write_a_second_after_an_administrators_edit_is_admitted(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """The administrator's managedFields entry keeps its time; only the writer's own entry changes."""
    node, token = own
    kube.patch_node(node, {"metadata": {"labels": {"team.example.com/owner": "infra"}}})
    time.sleep(1.1)  # managedFields times have one-second resolution
    answer = kube.patch_node(node, labels({"nvidia.com/gpu.count": "3"}, "nvidia.com/gpu.count"), token=token)
    assert answer.status == 200, answer.message


def test_another_node_is_refused(
    kube: ControlPlane, own: tuple[str, str], new_node: Callable[..., str]
) -> None:
    _, token = own
    other = new_node()
    answer = kube.patch_node(
        other, labels({"nvidia.com/gpu.count": "9"}, "nvidia.com/gpu.count"), token=token
    )
    assert refused(answer, "may only change its own Node"), answer.message
    assert "nvidia.com/gpu.count" not in kube.labels(other)


@pytest.mark.parametrize(
    "key",
    [
        "kubernetes.io/hostname",
        "node-role.kubernetes.io/control-plane",
        "node.kubernetes.io/instance-type",
        "k8s.io/x",
        "sub.k8s.io/x",
        "example.com/other",
    ],
)
def test_labels_outside_the_allowed_prefixes_are_refused(
    kube: ControlPlane, own: tuple[str, str], key: str
) -> None:
    node, token = own
    before = kube.labels(node)
    answer = kube.patch_node(node, labels({key: "evil"}), token=token)
    assert refused(answer, "may only change labels under"), answer.message
    assert kube.labels(node) == before


def test_taints_and_spec_are_refused(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, token = own
    taint = kube.patch_node(node, {"spec": {"taints": None}}, token=token)
    assert refused(taint, "may not add, change or remove taints"), taint.message
    for spec in ({"unschedulable": True}, {"providerID": "aws:///x"}, {"podCIDR": "10.1.0.0/24"}):
        answer = kube.patch_node(node, {"spec": spec}, token=token)
        assert refused(answer, "may not change the Node spec"), (spec, answer.message)
    assert kube.get_node(node)["spec"]["taints"][0]["key"] == "gpu"


def test_foreign_annotations_are_refused(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, token = own
    answer = kube.patch_node(node, {"metadata": {"annotations": {"example.com/note": "x"}}}, token=token)
    assert refused(answer, "may only change its annotation"), answer.message


def test_a_token_without_the_node_name_claim_is_refused(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, _ = own
    unbound = kube.pod_token(node, bind_pod=False)
    answer = kube.patch_node(
        node, labels({"nvidia.com/gpu.count": "1"}, "nvidia.com/gpu.count"), token=unbound
    )
    assert refused(answer, "no authentication.kubernetes.io/node-name claim"), answer.message


def test_status_subresource_is_not_in_rbac(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, token = own
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        labels({"nvidia.com/gpu.count": "1"}),
        token=token,
        content_type="application/merge-patch+json",
    )
    assert answer.status == 403 and 'cannot patch resource "nodes/status"' in answer.message


def test_server_side_apply_even_of_own_labels_is_refused(kube: ControlPlane, own: tuple[str, str]) -> None:
    """The writer sends merge patches; an apply entry would be field ownership a later apply acts on."""
    node, token = own
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {"nvidia.com/gpu.count": "8"},
            "annotations": {OWNED_ANNOTATION: "nvidia.com/gpu.count"},
        },
    }
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?fieldManager=nfd-lite&force=true",
        body,
        token=token,
        content_type="application/apply-patch+yaml",
    )
    assert refused(answer, "its own entry may only be an Update"), answer.message
    assert "nvidia.com/gpu.count" not in kube.labels(node)


def test_other_identities_are_not_held_to_the_writers_policy(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    node, _ = own
    other_account = kube.pod_token(node, account="other")
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-labeller-nfd-lite"}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"other-{node}"},
        "roleRef": role,
        "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": "gpu-labeller"}],
    }
    kube.must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    try:
        for token in (None, other_account):  # the admin, and another account with the same RBAC
            answer = kube.patch_node(node, {"metadata": {"labels": {"kubernetes.io/role": "x"}}}, token=token)
            assert answer.status == 200, answer.message
    finally:
        kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/other-{node}")


# ---- ownership: what RBAC plus prefixes alone let through ----


def test_a_label_the_writer_does_not_own_cannot_be_changed(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, token = own
    kube.patch_node(node, labels({"nvidia.com/gpu.product": "admin-set"}))
    answer = kube.patch_node(node, labels({"nvidia.com/gpu.product": "forged"}), token=token)
    assert refused(answer, "does not own"), answer.message
    removal = kube.patch_node(node, labels({"nvidia.com/gpu.product": None}), token=token)
    assert refused(removal, "does not own"), removal.message
    assert kube.labels(node)["nvidia.com/gpu.product"] == "admin-set"


def test_claiming_ownership_of_an_existing_label_is_refused(kube: ControlPlane, own: tuple[str, str]) -> None:
    node, token = own
    kube.patch_node(node, labels({"nvidia.com/gpu.product": "admin-set"}))
    answer = kube.patch_node(
        node, {"metadata": {"annotations": {OWNED_ANNOTATION: "nvidia.com/gpu.product"}}}, token=token
    )
    assert refused(answer, "ownership"), answer.message


@pytest.mark.parametrize(
    "key",
    [
        "nvidia.com/mig.config",
        "nvidia.com/gpu.deploy.driver",
        "nvidia.com/gpu.workload.config",
        "nvidia.com/device-plugin.config",
    ],
)
def test_gpu_operator_control_labels_are_refused(kube: ControlPlane, own: tuple[str, str], key: str) -> None:
    node, token = own
    before = kube.labels(node)
    answer = kube.patch_node(node, labels({key: "false"}, key), token=token)
    assert refused(answer, "control label"), answer.message
    assert kube.labels(node) == before


def _managers(kube: ControlPlane, node: str) -> list[tuple[str, object]]:
    return [(e["manager"], e.get("fieldsV1")) for e in kube.get_node(node)["metadata"]["managedFields"]]


@pytest.mark.parametrize(
    "forged",
    [
        [{}],  # "reset the record"
        [
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:team.example.com/owner": {}}}},
            }
        ],
    ],
)
def test_managed_fields_cannot_be_rewritten(
    kube: ControlPlane, own: tuple[str, str], forged: list[dict[str, Any]]
) -> None:
    node, token = own
    before = _managers(kube, node)
    answer = kube.patch_node(node, {"metadata": {"managedFields": forged}}, token=token)
    assert refused(answer, "managedFields"), answer.message
    assert _managers(kube, node) == before


def test_taking_over_a_label_moves_its_field_ownership_and_is_admitted(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """What the server itself does to managedFields when the writer changes a label it owns must pass."""
    node, token = own
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?fieldManager=kubectl-label",
        labels({"nvidia.com/gpu.count": "7"}, "nvidia.com/gpu.count"),
        content_type="application/merge-patch+json",
    )
    assert "kubectl-label" in [m for m, _ in _managers(kube, node)]
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?fieldManager=nfd-lite",
        labels({"nvidia.com/gpu.count": "2"}),
        token=token,
        content_type="application/merge-patch+json",
    )
    assert answer.status == 200, answer.message
    assert kube.labels(node)["nvidia.com/gpu.count"] == "2"
    fields = dict(_managers(kube, node))
    assert "f:nvidia.com/gpu.count" in str(fields["nfd-lite"])
    assert "f:nvidia.com/gpu.count" not in str(fields["kubectl-label"])


def test_a_token_for_a_deleted_and_recreated_node_is_refused(
    kube: ControlPlane, new_node: Callable[..., str]
) -> None:
    node = new_node()
    token = kube.pod_token(node)
    kube.delete_node(node)
    kube.create_node(node)
    answer = kube.patch_node(node, labels({"nvidia.com/gpu.count": "1"}, "nvidia.com/gpu.count"), token=token)
    assert refused(answer, "node-uid"), answer.message


def test_owned_labels_under_a_prefix_no_longer_allowed_may_be_removed(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """After --allow-prefix (and the policy's prefixes) are narrowed, the writer removes what it owns
    under the old prefix instead of leaving it orphaned; it still may not set anything there."""
    node, token = own
    kube.patch_node(
        node,
        labels({"example.com/gpu": "1", "node.kubernetes.io/x": "1"}, "example.com/gpu,node.kubernetes.io/x"),
    )
    again = kube.patch_node(node, labels({"example.com/gpu": "2"}), token=token)
    assert refused(again, "may only change labels under"), again.message
    reserved = kube.patch_node(node, labels({"node.kubernetes.io/x": None}, "example.com/gpu"), token=token)
    assert refused(reserved, "may only change labels under"), reserved.message
    removal = kube.patch_node(node, labels({"example.com/gpu": None}, "node.kubernetes.io/x"), token=token)
    assert removal.status == 200, removal.message
    assert "example.com/gpu" not in kube.labels(node)


# ---- managedFields: field ownership decides what a server-side apply later removes ----

CORDON_TAINT = {"key": "maintenance", "value": "disk", "effect": "NoExecute"}


def _apply(
    kube: ControlPlane, node: str, manager: str, body: dict[str, Any], token: str | None = None
) -> Any:
    doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, **body.get("metadata", {})}}
    if "spec" in body:
        doc["spec"] = body["spec"]
    return kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?fieldManager={manager}&force=true",
        doc,
        token=token,
        content_type="application/apply-patch+yaml",
    )


@pytest.fixture
def cordoned(kube: ControlPlane, own: tuple[str, str]) -> tuple[str, str]:
    """``own``, plus a server-side-apply manager (a GitOps tool) holding one label, and an administrator's
    cordon and NoExecute taint."""
    node, token = own
    applied = _apply(kube, node, "gitops", {"metadata": {"labels": {"team.example.com/pool": "a"}}})
    assert applied.status == 200, applied.message
    taints = [*kube.get_node(node)["spec"]["taints"], CORDON_TAINT]
    kube.patch_node(node, {"spec": {"unschedulable": True, "taints": taints}})
    return node, token


def _held_by_admin(kube: ControlPlane, node: str) -> bool:
    spec = kube.get_node(node)["spec"]
    return spec.get("unschedulable") is True and CORDON_TAINT in spec.get("taints", [])


def test_another_managers_fields_cannot_be_moved_into_an_apply_managers_entry(
    kube: ControlPlane, cordoned: tuple[str, str]
) -> None:
    """Moving the cordon and taint into the apply manager's fieldsV1 (times and headers kept) would make its
    next unchanged apply uncordon and un-taint the Node."""
    node, token = cordoned
    entries = kube.get_node(node)["metadata"]["managedFields"]
    admin = next(e for e in entries if e["manager"] == "gpu-labeller-tests" and "f:spec" in e["fieldsV1"])
    gitops = next(e for e in entries if e["manager"] == "gitops")
    gitops["fieldsV1"]["f:spec"] = admin["fieldsV1"].pop("f:spec")
    answer = kube.patch_node(node, {"metadata": {"managedFields": entries}}, token=token)
    assert refused(answer, "managedFields"), answer.message
    again = _apply(kube, node, "gitops", {"metadata": {"labels": {"team.example.com/pool": "a"}}})
    assert again.status == 200, again.message
    assert _held_by_admin(kube, node)


def test_the_writer_cannot_take_another_managers_fields_with_a_forced_apply(
    kube: ControlPlane, cordoned: tuple[str, str]
) -> None:
    """An apply as nfd-lite re-stating the taints leaves the spec unchanged but takes the taints' ownership
    from the administrator; the writer's own entry may only be an Update of its labels and annotation."""
    node, token = cordoned
    spec = kube.get_node(node)["spec"]
    body = {
        "metadata": {
            "labels": {"nvidia.com/gpu.count": "1"},
            "annotations": {OWNED_ANNOTATION: "nvidia.com/gpu.count"},
        },
        "spec": {"unschedulable": True, "taints": spec["taints"]},
    }
    answer = _apply(kube, node, "nfd-lite", body, token=token)
    assert refused(answer, "managedFields"), answer.message
    entries = kube.get_node(node)["metadata"]["managedFields"]
    assert [e["operation"] for e in entries if e["manager"] == "nfd-lite"] in ([], ["Update"])


def test_the_writer_cannot_give_itself_fields_it_did_not_change(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    node, token = own
    first = kube.patch_node(node, labels({"nvidia.com/gpu.count": "1"}, "nvidia.com/gpu.count"), token=token)
    assert first.status == 200, first.message
    entries = kube.get_node(node)["metadata"]["managedFields"]
    mine = next(e for e in entries if e["manager"] == "nfd-lite")
    mine["fieldsV1"]["f:spec"] = {"f:taints": {}}
    answer = kube.patch_node(node, {"metadata": {"managedFields": entries}}, token=token)
    assert refused(answer, "managedFields"), answer.message


@contextlib.contextmanager
def prefixes_narrowed(kube: ControlPlane, node: str, token: str) -> Iterator[None]:
    """The shipped policy with its allowed prefixes narrowed to nvidia.com/ (as an operator does with the
    chart's nfdLite.allowPrefixes), enforced for the duration; the shipped one again afterwards."""
    text = (RBAC_DIR / "admission-policy.yaml").read_text()
    shipped = "\"['nvidia.com/', 'feature.node.kubernetes.io/']\""
    assert shipped in text
    # A label created and recorded, the record keeping every key it lists (a key may leave it only with its
    # label): admitted unless the prefix it is under is not allowed.
    key = "feature.node.kubernetes.io/probe"

    def probe() -> dict[str, Any]:
        recorded = kube.annotations(node).get(OWNED_ANNOTATION, "")
        return labels({key: "x"}, ",".join(sorted({key, *filter(None, recorded.split(","))})))

    def enforce(manifest: str, admitted: bool) -> None:
        kube.kubectl(
            "apply", "--server-side", "--field-manager=gpu-labeller-tests", "-f", "-", stdin=manifest
        )
        kube.settle_policies()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            answer = kube.request(
                "PATCH",
                f"/api/v1/nodes/{node}?dryRun=All",
                probe(),
                token=token,
                content_type="application/merge-patch+json",
            )
            if (answer.status == 200) == admitted:
                return
            time.sleep(0.25)
        raise AssertionError(f"the changed admission policy was not enforced within 60 s: {answer.message}")

    enforce(text.replace(shipped, "\"['nvidia.com/']\""), admitted=False)
    try:
        yield
    finally:
        enforce(text, admitted=True)


def test_owned_nfd_labels_may_be_removed_after_their_prefix_is_no_longer_allowed(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """feature.node.kubernetes.io/ is NFD's namespace, not one reserved for Kubernetes: with the prefixes
    narrowed to nvidia.com/, the writer must still be able to drop what it owns there, in the same patch
    as its other changes, or no label of the Node is ever updated again."""
    node, token = own
    key = "feature.node.kubernetes.io/pci-10de.present"
    owned = f"{key},nvidia.com/gpu.count"
    first = kube.patch_node(node, labels({key: "true", "nvidia.com/gpu.count": "1"}, owned), token=token)
    assert first.status == 200, first.message
    with prefixes_narrowed(kube, node, token):
        again = kube.patch_node(node, labels({key: "false"}), token=token)
        assert refused(again, "may only change labels under"), again.message
        narrowed = kube.patch_node(
            node, labels({key: None, "nvidia.com/gpu.count": "2"}, "nvidia.com/gpu.count"), token=token
        )
        assert narrowed.status == 200, narrowed.message
    assert key not in kube.labels(node) and kube.labels(node)["nvidia.com/gpu.count"] == "2"


# ---- size: the writer's cap is reachable, and nothing grows past it ----


def _many(count: int, value: str) -> dict[str, str]:
    return {f"nvidia.com/gpu.test-{i:04d}": value for i in range(count)}


def test_the_writers_label_cap_is_reachable_and_a_bulk_change_of_all_of_it_is_admitted(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """nfd-lite's default --max-labels is 1,000: every owned label changing at once (a driver update renames
    them all) must stay within CEL's cost limits, or the Node stays stale."""
    node, token = own
    many = _many(1000, "a")
    owned = ",".join(sorted(many))
    first = kube.patch_node(node, labels(many, owned), token=token)
    assert first.status == 200, first.message
    bulk = kube.patch_node(node, labels(_many(1000, "b")), token=token)
    assert bulk.status == 200, bulk.message
    emptied = kube.patch_node(
        node,
        {"metadata": {"labels": dict.fromkeys(many), "annotations": {OWNED_ANNOTATION: None}}},
        token=token,
    )
    assert emptied.status == 200, emptied.message  # prune: all of them removed with the record
    assert not any(key in kube.labels(node) for key in many)


def test_labels_the_writer_creates_must_be_recorded_as_owned(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """An unrecorded label would be one the writer can never remove again, and one no cap counts."""
    node, token = own
    answer = kube.patch_node(node, labels({"nvidia.com/gpu.unrecorded": "1"}), token=token)
    assert refused(answer, "must record"), answer.message
    assert "nvidia.com/gpu.unrecorded" not in kube.labels(node)


def test_the_node_cannot_be_grown_past_the_writers_cap_and_headroom(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    node, token = own
    many = _many(1300, "a")
    answer = kube.patch_node(node, labels(many, ",".join(sorted(many))), token=token)
    assert refused(answer, "labels at most"), answer.message
    assert len(kube.labels(node)) < 10


def test_a_record_an_administrator_wrote_out_of_order_still_counts(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """Keys are looked up by bucket only where the record is in order; an edited one is searched whole."""
    node, token = own
    many = _many(200, "a")
    kube.patch_node(node, labels(many, ",".join(sorted(many, reverse=True))))
    answer = kube.patch_node(node, labels(_many(200, "b")), token=token)
    assert answer.status == 200, answer.message
    kube.patch_node(node, labels({"nvidia.com/gpu.product": "admin-set"}))
    foreign = kube.patch_node(node, labels({"nvidia.com/gpu.product": "x"}), token=token)
    assert refused(foreign, "does not own"), foreign.message


# ---- the ownership record lists exactly the labels the writer has ----


def test_a_removed_label_cannot_stay_in_the_record(kube: ControlPlane, own: tuple[str, str]) -> None:
    """A key left behind would let the token later change a label of that name an administrator sets."""
    node, token = own
    owned = "nvidia.com/gpu.count,nvidia.com/gpu.memory"
    first = kube.patch_node(
        node, labels({"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "8"}, owned), token=token
    )
    assert first.status == 200, first.message
    kept = kube.patch_node(node, labels({"nvidia.com/gpu.memory": None}), token=token)
    assert refused(kept, "may only list labels the Node carries"), kept.message
    listed = kube.patch_node(node, labels({"nvidia.com/gpu.memory": None}, owned), token=token)
    assert refused(listed, "may only list labels the Node carries"), listed.message
    removed = kube.patch_node(
        node, labels({"nvidia.com/gpu.memory": None}, "nvidia.com/gpu.count"), token=token
    )
    assert removed.status == 200, removed.message


def test_a_key_leaves_the_record_only_with_its_label(kube: ControlPlane, own: tuple[str, str]) -> None:
    """Dropping the record while the labels stay leaves them to nobody: the real writer would refuse to
    touch them again, and prune would never remove them."""
    node, token = own
    first = kube.patch_node(node, labels({"nvidia.com/gpu.count": "1"}, "nvidia.com/gpu.count"), token=token)
    assert first.status == 200, first.message
    for record in (None, ""):
        dropped = kube.patch_node(
            node, {"metadata": {"annotations": {OWNED_ANNOTATION: record}}}, token=token
        )
        assert refused(dropped, "only in the request that removes its label"), dropped.message
    other = kube.patch_node(
        node, labels({"nvidia.com/gpu.family": "x"}, "nvidia.com/gpu.family"), token=token
    )
    assert refused(other, "only in the request that removes its label"), other.message
    nfd = "feature.node.kubernetes.io/pci-10de.present"  # NFD's namespace is not reserved: it may not leave
    both = f"{nfd},nvidia.com/gpu.count"
    assert kube.patch_node(node, labels({nfd: "true"}, both), token=token).status == 200
    orphaned = kube.patch_node(node, labels({}, "nvidia.com/gpu.count"), token=token)
    assert refused(orphaned, "only in the request that removes its label"), orphaned.message
    assert kube.annotations(node)[OWNED_ANNOTATION] == both


def test_an_edited_record_is_brought_back_to_what_the_node_carries(
    kube: ControlPlane, own: tuple[str, str]
) -> None:
    """An administrator deleted an owned label (its key stays listed) and listed a control label: the
    writer's next write drops both keys, the control label itself untouched."""
    node, token = own
    kube.patch_node(
        node,
        labels(
            {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "8"},
            "nvidia.com/gpu.count,nvidia.com/gpu.memory,nvidia.com/mig.config",
        ),
    )
    kube.patch_node(node, labels({"nvidia.com/gpu.memory": None}))
    answer = kube.patch_node(node, labels({"nvidia.com/gpu.count": "2"}, "nvidia.com/gpu.count"), token=token)
    assert answer.status == 200, answer.message
    assert kube.labels(node)["nvidia.com/mig.config"] == "all-1g.5gb"
